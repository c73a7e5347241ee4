"""The streaming Perfetto decoder: our traces read block by block whatever the block size,
fields in any order, and every kind of bad bytes refused with the file named (never a crash,
a hang or unbounded memory)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import assert_same_spans, build_spans
from conftest import pb_annotation as annotation
from conftest import pb_bytes as b
from conftest import pb_varint as v

from hotspan._schema import SPAN_SCHEMA, TRACE_SCHEMA, with_pandas_dtypes
from hotspan._selftime import with_self_ns
from hotspan.formats import TraceFileError, export, load, _perfetto as perfetto
from hotspan.formats import _perfetto_codec as codec
from hotspan.formats import _base as _base


def varint(value: int) -> bytes:
    return codec.field_varint(0, value)[1:]  # field 0's tag is the single byte 0x00


def packet(*fields: bytes) -> bytes:
    return codec.packet(b"".join(fields))


# A hand-written trace in our layout: one process, one thread, one span and one instant.
DESCRIPTORS = packet(
    b(60, v(1, 1) + b(3, v(1, 42) + b(6, "p") + b(8, "hotspan.rank=0") + b(8, "hotspan.pid=42"))),
    v(10, 1),
) + packet(b(60, v(1, 2) + v(5, 1) + b(4, v(1, 42) + v(2, 43) + b(5, "worker"))), v(10, 1))
INTERNED = packet(
    v(10, 2),
    v(13, 1),
    b(
        12,
        b(2, v(1, 1) + b(2, "step"))
        + b(2, v(1, 2) + b(2, "mark"))
        + b(3, v(1, 1) + b(2, "span_id"))
        + b(3, v(1, 3) + b(2, "depth")),
    ),
)


def event(ts: int, kind: int, *fields: bytes, track: int = 2) -> bytes:
    return packet(v(8, ts), b(11, v(9, kind) + v(11, track) + b"".join(fields)), v(10, 2), v(13, 2))


BEGIN = event(100, 1, v(10, 1), annotation(1, 7), annotation(3, 0, tag=4))
INSTANT = event(150, 3, v(10, 2), annotation(1, 8), annotation(3, 1, tag=4))
END = event(200, 2)
GOOD = DESCRIPTORS + INTERNED + BEGIN + INSTANT + END


def write(tmp_path, data: bytes, name: str = "t.pftrace"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refused(path, *fragments: str) -> TraceFileError:
    with pytest.raises(TraceFileError) as error:
        load(path)
    message = str(error.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return error.value


# --------------------------------------------------------------------------- our traces


@pytest.mark.parametrize("block", [64, 997, 4 << 20])
@pytest.mark.parametrize("batch_rows", [997, 1 << 20])
def test_streaming_reader_reads_our_traces(block, batch_rows, spans, tmp_path, monkeypatch):
    monkeypatch.setattr(_base, "BATCH_ROWS", batch_rows)
    path = tmp_path / "trace.pftrace"
    export(spans, path)
    monkeypatch.setattr(perfetto, "_READ_BLOCK", block)
    back = load(path)
    assert_same_spans(spans, back, keep_order=False)
    assert back.schema.metadata == spans.schema.metadata


def test_a_hand_written_trace(tmp_path):
    table = load(write(tmp_path, GOOD))
    rows = sorted(table.to_pylist(), key=lambda r: r["span_id"])
    assert [
        (
            r["span_id"],
            r["name"],
            r["start_ns"],
            r["duration_ns"],
            r["depth"],
            r["thread_name"],
            r["pid"],
            r["thread_id"],
        )
        for r in rows
    ] == [(7, "step", 100, 100, 0, "worker", 42, 43), (8, "mark", 150, 0, 1, "worker", 42, 43)]


def test_fields_in_another_order_and_unknown_fields_read_the_same(tmp_path):
    """A reader of protobuf takes fields in any order and skips what it does not know."""
    unknown = (
        v(99, 5)
        + b(98, b"\x01\x02")
        + varint((96 << 3) | 1)
        + bytes(8)
        + varint((95 << 3) | 5)
        + bytes(4)
    )
    begin = packet(
        v(13, 2),
        v(10, 2),
        b(11, annotation(3, 0, tag=4) + v(11, 2) + v(10, 1) + unknown + annotation(1, 7) + v(9, 1)),
        unknown,
        v(8, 100),
    )
    path = write(tmp_path, DESCRIPTORS + INTERNED + begin + INSTANT + END)
    assert load(path).equals(load(write(tmp_path, GOOD, "good.pftrace")))


def test_an_event_on_a_process_track_is_refused(tmp_path):
    refused(
        write(tmp_path, GOOD + event(300, 3, v(10, 1), annotation(1, 9), track=1)),
        "no thread descriptor",
    )


def test_an_empty_table_keeps_its_metadata(tmp_path):
    # with_pandas_dtypes: as drain() makes it (every loader adds those dtypes).
    table = SPAN_SCHEMA.with_metadata(
        with_pandas_dtypes({b"hotspan.host": "hôte".encode(), b"raw": b"\xff\x00"})
    ).empty_table()
    path = tmp_path / "empty.pftrace"
    export(table, path)
    back = load(path)
    assert back.num_rows == 0 and back.schema.metadata == table.schema.metadata


# --------------------------------------------------------------------------- bad bytes, one case each


@pytest.mark.parametrize("length", [1 << 20, 1 << 40, (1 << 64) - 1])
def test_a_huge_packet_length(tmp_path, length):
    refused(
        write(tmp_path, GOOD + b"\x0a" + varint(length) + b"\x40\x01"),
        "runs past the end of the file",
    )


def test_a_varint_longer_than_ten_bytes(tmp_path):
    refused(write(tmp_path, GOOD + b"\x0a" + b"\xff" * 20 + b"\x01" * 10), "not a varint")


def test_a_field_length_past_its_packet(tmp_path):
    body = v(8, 5) + b"\x5a" + varint(1 << 30) + b"\x48\x01"
    refused(write(tmp_path, GOOD + codec.packet(body)), "runs past the end of its packet")


def test_a_packet_larger_than_the_limit_is_refused_unread(tmp_path):
    path = tmp_path / "huge.pftrace"
    with open(path, "wb") as f:
        f.write(GOOD + b"\x0a" + varint(100 << 20))
        f.truncate(len(GOOD) + 5 + (100 << 20))  # sparse: the length is true to the file
    refused(path, "more than")


@pytest.mark.parametrize("keep", range(1, len(GOOD)))
def test_every_truncation(tmp_path, keep):
    path = write(tmp_path, GOOD[:keep])
    try:
        table = load(path)
    except TraceFileError as error:
        assert str(path) in str(error)
    else:  # a cut between packets is a shorter trace: never a garbled row
        assert table.num_rows <= 2


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (
            event(300, 3, b(10, b"\x01"), annotation(1, 9)),
            "wire type 2, not a varint",
        ),  # name iid as bytes
        (packet(v(8, 5), v(11, 3)), "wire type 0, not a message"),  # a track event as a varint
        (packet(b(8, b"x")), "not a varint"),  # a timestamp as bytes
        (
            event(300, 3, v(10, 1), b(4, b(1, b"x"))),
            "wire type 2",
        ),  # an annotation name iid as bytes
        (
            packet(b"\x0b" + b"\x0b" * 100 + b"\x0c" * 100),
            "wire type 3",
        ),  # groups: deep nesting, deprecated
        (packet(b"\x0f"), "wire type 7"),
    ],
)
def test_wrong_wire_types(tmp_path, bad, fragment):
    refused(write(tmp_path, GOOD + bad), fragment)


def test_deeply_nested_unknown_messages_are_skipped_without_recursion(tmp_path):
    nested = b""
    for _ in range(5000):
        nested = b(1, nested)
    table = load(write(tmp_path, GOOD + packet(v(10, 5), b(77, nested))))
    assert table.num_rows == 2


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (event(300, 3, v(10, 9), annotation(1, 9)), "name is an interned id never defined"),
        (
            event(300, 3, v(10, 1), v(3, 5), annotation(1, 9)),
            "category is an interned id never defined",
        ),
        (
            event(300, 3, v(10, 1), annotation(1, 9), annotation(40, 1)),
            "names id 40, never interned",
        ),
        (event(300, 3, v(10, 1), annotation(1, 9), annotation(1 << 40, 1)), "never interned"),
        (event(300, 3, v(10, 1)), "without a span_id"),
        (event(300, 3, annotation(1, 9)), "without an interned name"),
        (event(300, 2), "never began"),
        (event(300, 1, v(10, 1), annotation(1, 9)), "never end"),
        (event(300, 7, v(10, 1), annotation(1, 9)), "of type 7"),
        (event(300, 3, v(10, 1), annotation(1, 9), track=77), "no thread descriptor"),
        (packet(b(11, v(9, 3) + v(11, 2))), "without a timestamp"),
        (packet(v(10, 2), b(12, b(2, v(1, 1) + b(2, "other")))), "means two strings"),
        (packet(v(10, 2), b(12, b(2, b(2, "no iid")))), "malformed interned string"),
        (packet(b(60, v(1, 9) + b(3, b(8, "hotspan.rank=x")))), "malformed track descriptor"),
        (packet(b(60, v(1, 9) + b(3, b(8, "hotspan.meta=[1")))), "hotspan.meta"),
        (b"\x12\x00", "not a TracePacket"),
    ],
)
def test_packets_outside_what_we_read(tmp_path, bad, fragment):
    refused(write(tmp_path, GOOD + bad), fragment)


def test_a_thread_track_without_its_process(tmp_path):
    orphan = packet(b(60, v(1, 5) + v(5, 99) + b(4, v(1, 1) + v(2, 2))), v(10, 1))
    refused(
        write(tmp_path, GOOD + orphan + event(300, 3, v(10, 1), annotation(1, 9), track=5)),
        "no process descriptor",
    )


# --------------------------------------------------------------------------- mutation fuzz

FUZZ_CHILD = textwrap.dedent("""
    import json, random, resource, sys
    from pathlib import Path
    from hotspan.formats import load

    source, directory, count, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    data = source.read_bytes()
    rng = random.Random(seed)
    outcome = {"loaded": 0, "refused": 0}

    def huge_varint():
        return bytes([0xFF] * rng.randrange(1, 9) + [rng.randrange(1, 0x80)])

    for i in range(count):
        kind = i % 5
        if kind == 0:    # truncation
            mutated = data[:rng.randrange(1, len(data))]
        elif kind == 1:  # flipped bytes
            mutated = bytearray(data)
            for _ in range(rng.randrange(1, 9)):
                mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        elif kind == 2:  # a huge varint length written over some length-looking spot
            at = rng.randrange(len(data) - 1)
            mutated = data[:at] + huge_varint() + data[at + 1:]
        elif kind == 3:  # garbage spliced in
            at = rng.randrange(len(data))
            mutated = data[:at] + rng.randbytes(rng.randrange(1, 64)) + data[at:]
        else:            # a block of the file replaced by another of it
            a, b = sorted(rng.randrange(len(data)) for _ in range(2))
            c = rng.randrange(len(data))
            mutated = data[:a] + data[c:c + (b - a)] + data[b:]
        path = directory / f"m{i}.pftrace"
        path.write_bytes(bytes(mutated))
        try:
            table = load(path)
        except (ValueError, OSError) as error:
            assert str(path) in str(error), (i, str(error))
            outcome["refused"] += 1
        else:
            table.validate(full=True)
            outcome["loaded"] += 1
        path.unlink()
    # VmHWM: this process's own peak (ru_maxrss would keep the parent's across exec).
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")] if sys.platform == "linux" else []
    outcome["peak_kib"] = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(outcome))
""")


@pytest.mark.slow
def test_mutation_fuzz_of_the_loader(tmp_path):
    """Hundreds of mutated traces, loaded in a child process (a crash or a hang is seen as
    such, not as a dead test run): each loads as a valid table or is refused with the
    file named; the child's peak memory stays small."""
    table = build_spans(seed=5, roots_per_thread=2)
    source = tmp_path / "source.pftrace"
    export(table, source)
    count = 400
    result = subprocess.run(
        [sys.executable, "-c", FUZZ_CHILD, str(source), str(tmp_path), str(count), "11"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["loaded"] + outcome["refused"] == count
    assert outcome["refused"] > count // 2
    assert outcome["peak_kib"] < 1 << 20, f"the fuzz child peaked at {outcome['peak_kib']} KiB"


def test_start_times_too_spread_for_the_radix_key_still_round_trip(tmp_path):
    """Thread, start and tie bits past 64: the encoder orders rows with numpy's lexsort."""
    import pyarrow as pa

    rows = []
    for thread in range(5):
        for k, start in enumerate((1 << 62, 0, 1 << 61)):
            rows.append(
                {
                    "span_id": 10 * thread + k + 1,
                    "parent_id": None,
                    "name": "x",
                    "category": None,
                    "start_ns": start,
                    "end_ns": start + 5,
                    "duration_ns": 5,
                    "depth": 0,
                    "thread_id": thread,
                    "thread_name": "t",
                    "pid": 1,
                    "rank": 0,
                    "arg": None,
                    "error": False,
                }
            )
    table = with_self_ns(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA))
    path = tmp_path / "wide.pftrace"
    export(table, path)
    assert_same_spans(table, load(path), keep_order=False)


@pytest.mark.parametrize("deepest", [10, 22, 41])
def test_deep_nesting_keeps_every_span_paired_with_its_own_end(tmp_path, deepest):
    """Depths 0..deepest on each thread (the tie rank needs more bits than shallow traces),
    in drain order: each span comes back with its own start and end."""
    import pyarrow as pa

    rows, next_id = [], 1
    for thread in range(3):
        base = 1_000_000 * (thread + 1)
        parent = None
        chain = []
        for depth in range(deepest):  # nested: [base + depth, base + 1000 - depth)
            chain.append(
                {
                    "span_id": next_id,
                    "parent_id": parent,
                    "name": f"d{depth}",
                    "category": None,
                    "start_ns": base + depth,
                    "end_ns": base + 1000 - depth,
                    "duration_ns": 1000 - 2 * depth,
                    "depth": depth,
                    "thread_id": thread,
                    "thread_name": "t",
                    "pid": 1,
                    "rank": 0,
                    "arg": None,
                    "error": False,
                }
            )
            parent = next_id
            next_id += 1
        last = chain[-1]
        chain.append(
            {
                **last,
                "span_id": next_id,
                "parent_id": parent,
                "name": "mark",
                "depth": deepest,
                "start_ns": last["end_ns"],
                "end_ns": last["end_ns"],
                "duration_ns": 0,
            }
        )
        next_id += 1
        rows += reversed(chain)  # drain order: a span is recorded when it ends
    table = with_self_ns(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA))
    path = tmp_path / "deep.pftrace"
    export(table, path)
    assert_same_spans(table, load(path), keep_order=False)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_failed_write_is_an_os_error(spans):
    """A write that fails (the disk is full) reaches the caller as OSError from the thread
    that writes the blocks, and nothing hangs; a later export still works."""
    from pathlib import Path

    with pytest.raises(OSError) as caught:
        perfetto.PerfettoExporter()._write(spans, Path("/dev/full"))
    assert caught.value.errno == errno.ENOSPC


def test_varints_of_every_width_are_exact():
    """The encoder's varints, the nine- and ten-byte ones (timestamps: eight groups stored
    at once) included, are protobuf's, byte for byte."""
    import random

    def varint(v: int) -> bytes:
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(out + bytes([v]))

    rng = random.Random(7)
    values = [0, 1, 127, 128, (1 << 56) - 1, 1 << 56, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
    values += [1_760_000_000_123_456_789] + [
        rng.getrandbits(rng.randrange(1, 65)) for _ in range(5000)
    ]
    for value in values:
        assert codec.field_varint(1, value) == b"\x08" + varint(value), value
