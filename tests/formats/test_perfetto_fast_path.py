"""The Perfetto decoder's fast path: the packets of our own encoder, in its exact field
layout, are read straight through; any other valid packet (fields reordered, fields we do
not know, annotation ids that mean something else, a varint in more bytes than it needs)
takes the general path, and the table is the same either way. A bad packet in our layout
is refused with the general path's own words. And the encoder's shortcut: no flow columns
to read when no row has a flow, the same bytes."""

from __future__ import annotations

import os

import pytest

from conftest import assert_same_spans
from conftest import pb_annotation as annotation
from conftest import pb_bytes as b
from conftest import pb_varint as v

from hotspan.formats import TraceFileError, export, load
from hotspan.formats import _perfetto_codec as codec


# --------------------------------------------------------------------------- raw protobuf


def read_varint(data: bytes, p: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[p]
        value |= (byte & 0x7F) << shift
        p += 1
        if byte < 0x80:
            return value, p
        shift += 7


def varint(value: int) -> bytes:
    return codec.field_varint(0, value)[1:]  # field 0's tag is the single byte 0x00


def fields(message: bytes) -> list[tuple[int, int, bytes]]:
    """(number, wire type, the field's bytes whole) of each field of a message."""
    out, p = [], 0
    while p < len(message):
        start = p
        tag, p = read_varint(message, p)
        wire = tag & 7
        if wire == 0:
            _, p = read_varint(message, p)
        elif wire == 1:
            p += 8
        elif wire == 5:
            p += 4
        else:
            assert wire == 2
            length, p = read_varint(message, p)
            p += length
        out.append((tag >> 3, wire, message[start:p]))
    return out


def body(field: bytes) -> bytes:
    """The value of a length-delimited field (its bytes whole)."""
    _, p = read_varint(field, 0)
    length, p = read_varint(field, p)
    return field[p : p + length]


def packets(data: bytes) -> list[bytes]:
    """The bodies of a trace's packets."""
    return [body(whole) for number, _, whole in fields(data) if number == 1]


def is_event(packet: bytes) -> bool:
    return any(number == 11 for number, _, _ in fields(packet))


def rewrite(data: bytes, change, every: int = 1) -> tuple[bytes, int]:
    """The trace with ``change(packet body) -> body`` applied to every ``every``-th event
    packet, and how many of those it changed (and that carry no thread name: those take
    the general path anyway)."""
    out, k, changed = [], 0, 0
    for packet in packets(data):
        if is_event(packet):
            if k % every == 0:
                new = change(packet)
                changed += new != packet and not renamed(packet)
                packet = new
            k += 1
        out.append(codec.packet(packet))
    return b"".join(out), changed


def with_event(packet: bytes, change) -> bytes:
    """The packet with its TrackEvent's body replaced by ``change(body)``."""
    return b"".join(
        codec.field_bytes(11, change(body(whole))) if number == 11 else whole
        for number, _, whole in fields(packet)
    )


def reversed_fields(message: bytes) -> bytes:
    return b"".join(whole for _, _, whole in reversed(fields(message)))


# Valid rewrites of an event packet, each meaning what it meant before.
REWRITES = {
    "packet fields reversed": reversed_fields,
    "event fields reversed": lambda p: with_event(p, reversed_fields),
    "annotations reversed": lambda p: with_event(
        p,
        lambda e: (
            b"".join(w for n, _, w in fields(e) if n != 4)
            + b"".join(w for n, _, w in reversed(fields(e)) if n == 4)
        ),
    ),
    "an unknown field in the packet": lambda p: p + codec.field_varint(99, 5),
    "unknown fields in the event": lambda p: with_event(
        p, lambda e: e + codec.field_bytes(98, b"\x01") + varint((96 << 3) | 1) + bytes(8)
    ),
    "no sequence flags": lambda p: b"".join(w for n, _, w in fields(p) if n != 13),
    "the type in two bytes": lambda p: with_event(
        p,
        lambda e: b"".join(
            varint(9 << 3) + bytes([0x80 | body_value(w), 0x00]) if n == 9 else w
            for n, _, w in fields(e)
        ),
    ),
}


def body_value(field: bytes) -> int:
    _, p = read_varint(field, 0)
    return read_varint(field, p)[0]


def decoded(path) -> codec.Decoder:
    decoder = codec.Decoder()
    with open(path, "rb") as stream:
        decoder.read(stream.fileno(), 1 << 16, os.fstat(stream.fileno()).st_size)
    return decoder


@pytest.fixture(scope="module")
def ours(spans, tmp_path_factory):
    path = tmp_path_factory.mktemp("fast") / "ours.pftrace"
    export(spans, path)
    return path


# --------------------------------------------------------------------------- our files


def renamed(packet: bytes) -> bool:
    """An event carrying its thread's name (annotation id 6: a thread renamed mid-trace)."""
    return any(
        n == 4 and fields(body(w))[0][2] == b"\x08\x06"
        for number, _, whole in fields(packet)
        if number == 11
        for n, _, w in fields(body(whole))
    )


def test_our_files_take_the_fast_path(spans, ours):
    """Every event packet but those of a span whose thread was renamed (its name as an
    annotation, which the general path reads)."""
    events = [p for p in packets(ours.read_bytes()) if is_event(p)]
    instants = sum(d == 0 for d in spans.column("duration_ns").to_pylist())
    assert len(events) == 2 * spans.num_rows - instants
    general = sum(map(renamed, events))
    assert general > 0  # the fixture renames threads
    assert decoded(ours).our_packets == len(events) - general
    assert_same_spans(spans, load(ours), keep_order=False)


# --------------------------------------------------------------------------- other writers


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_a_valid_rewrite_takes_the_general_path_and_loads_the_same(name, ours, tmp_path):
    """Every packet the rewrite changed is read by the general path, the rest by the fast."""
    path = tmp_path / "other.pftrace"
    data, changed = rewrite(ours.read_bytes(), REWRITES[name])
    path.write_bytes(data)
    assert changed > 10_000
    assert decoded(path).our_packets == decoded(ours).our_packets - changed
    assert load(path).equals(load(ours), check_metadata=True)


def test_our_packets_and_others_mixed_load_the_same(ours, tmp_path):
    path = tmp_path / "mixed.pftrace"
    data, changed = rewrite(ours.read_bytes(), REWRITES["packet fields reversed"], every=2)
    path.write_bytes(data)
    fast = decoded(ours).our_packets
    assert fast / 3 < changed < fast * 2 / 3
    assert decoded(path).our_packets == fast - changed
    assert load(path).equals(load(ours), check_metadata=True)


def swapped_iids(message: bytes, iids: dict[int, int]) -> bytes:
    """A message of which field 1 (an interned entry's or an annotation's name id) is
    renumbered by ``iids``."""
    return b"".join(
        codec.field_varint(1, iids.get(body_value(w), body_value(w))) if n == 1 else w
        for n, _, w in fields(message)
    )


def test_annotation_ids_that_mean_something_else_take_the_general_path(ours, tmp_path):
    """Another writer interns the same annotation names under other ids (span_id as 2,
    parent_id as 1): every event is read by the general path, through the names."""
    swap = {1: 2, 2: 1}

    def packet(p: bytes) -> bytes:
        out = []
        for number, _, whole in fields(p):
            if number == 12:  # interned data: the annotation names (field 3) renumbered
                inner = b"".join(
                    codec.field_bytes(3, swapped_iids(body(w), swap)) if n == 3 else w
                    for n, _, w in fields(body(whole))
                )
                whole = codec.field_bytes(12, inner)
            elif number == 11:  # the events' annotations renumbered alike
                inner = b"".join(
                    codec.field_bytes(4, swapped_iids(body(w), swap)) if n == 4 else w
                    for n, _, w in fields(body(whole))
                )
                whole = codec.field_bytes(11, inner)
            out.append(whole)
        return b"".join(out)

    data = b"".join(codec.packet(packet(p)) for p in packets(ours.read_bytes()))
    path = tmp_path / "swapped.pftrace"
    path.write_bytes(data)
    assert data != ours.read_bytes()
    assert decoded(path).our_packets == 0
    assert load(path).equals(load(ours), check_metadata=True)


# --------------------------------------------------------------------------- bad packets in our layout


DESCRIPTORS = codec.packet(
    b(60, v(1, 1) + b(3, v(1, 42) + b(6, "p") + b(8, "hotspan.rank=0") + b(8, "hotspan.pid=42")))
    + v(10, 1)
) + codec.packet(b(60, v(1, 2) + v(5, 1) + b(4, v(1, 42) + v(2, 43) + b(5, "worker"))) + v(10, 1))
# Every annotation name interned as our encoder interns them: the fast path is on.
INTERNED = codec.packet(
    v(10, 2)
    + v(13, 1)
    + b(
        12,
        b(2, v(1, 1) + b(2, "step"))
        + b"".join(b(3, v(1, i + 1) + b(2, name)) for i, name in enumerate(codec.ANNOTATIONS)),
    )
)


def ours_event(ts: int, kind: int, *annotations: bytes) -> bytes:
    """An event packet in our encoder's layout (ts, event, sequence, flags)."""
    event = v(9, kind) + v(11, 2) + (v(10, 1) + b"".join(annotations) if kind != 2 else b"")
    return codec.packet(v(8, ts) + b(11, event) + v(10, 2) + v(13, 2))


def begin(ts: int, span_id: int, depth: int = 0, kind: int = 1) -> bytes:
    return ours_event(ts, kind, annotation(1, span_id), annotation(3, depth, tag=4))


def test_our_layout_by_hand_takes_the_fast_path(tmp_path):
    path = tmp_path / "t.pftrace"
    path.write_bytes(
        DESCRIPTORS + INTERNED + begin(100, 7) + begin(150, 8, 1, kind=3) + ours_event(200, 2)
    )
    assert decoded(path).our_packets == 3
    rows = load(path).select(["span_id", "start_ns", "duration_ns", "depth"]).to_pylist()
    assert sorted(rows, key=lambda r: r["span_id"]) == [
        {"span_id": 7, "start_ns": 100, "duration_ns": 100, "depth": 0},
        {"span_id": 8, "start_ns": 150, "duration_ns": 0, "depth": 1},
    ]


@pytest.mark.parametrize(
    "events, fragment",
    [
        (ours_event(300, 2), "never began"),
        (begin(300, 9) + ours_event(299, 2), "a slice ends before it begins"),
        (begin(300, 9), "never end"),
        (ours_event(300, 1, annotation(1, 9), annotation(3, 1 << 40, tag=4)), "a depth of"),
        (ours_event(1 << 63, 3, annotation(1, 9), annotation(3, 0, tag=4)), "past 2^63"),
        (ours_event(300, 3, annotation(3, 0, tag=4)), "without a span_id"),
    ],
)
def test_bad_packets_in_our_layout_say_what_the_general_path_says(events, fragment, tmp_path):
    path = tmp_path / "bad.pftrace"
    path.write_bytes(DESCRIPTORS + INTERNED + events)
    with pytest.raises(TraceFileError) as error:
        load(path)
    assert fragment in str(error.value) and str(path) in str(error.value)


# --------------------------------------------------------------------------- the columns' room


def test_the_written_span_count_sizes_the_columns_once(spans, ours):
    """Our files say how many spans they hold: the decoder makes room for exactly those
    before the first row (no column copied as it grows)."""
    decoder = decoded(ours)
    columns = decoder.columns()
    assert len(columns["start"]) == spans.num_rows
    assert columns["start"].base.size == 8 * spans.num_rows  # the buffer under the column


@pytest.mark.parametrize("claimed", [10**12, 2**63 - 1])
def test_a_span_count_the_file_cannot_hold_is_not_believed(claimed, tmp_path):
    """A label claiming more spans than the file's bytes could hold reserves nothing (no
    huge allocation); the load reads what is there and says the rest is missing."""
    descriptors = codec.packet(
        b(
            60,
            v(1, 1)
            + b(
                3,
                v(1, 42)
                + b(8, "hotspan.rank=0")
                + b(8, "hotspan.pid=42")
                + b(8, f"hotspan.spans={claimed}"),
            ),
        )
        + v(10, 1)
    ) + codec.packet(b(60, v(1, 2) + v(5, 1) + b(4, v(1, 42) + v(2, 43) + b(5, "w"))) + v(10, 1))
    path = tmp_path / "claims.pftrace"
    path.write_bytes(descriptors + INTERNED + begin(100, 7) + ours_event(200, 2))
    with pytest.warns(UserWarning, match="missing"):
        table = load(path)
    assert table.column("span_id").to_pylist() == [7]


def test_track_columns_refuses_a_track_past_its_tables():
    import numpy as np

    one = (
        np.zeros(1, np.int64),
        np.zeros(1, np.int32),
        np.zeros(1, np.int64),
        np.zeros(1, np.int32),
    )
    pid, rank, tid, name = codec.track_columns(np.array([0, 0], np.int32), *one)
    assert pid.size >= 16 and rank.size >= 8
    with pytest.raises(ValueError, match="row 1 names track 1"):
        codec.track_columns(np.array([0, 1], np.int32), *one)


# --------------------------------------------------------------------------- the encoder's flows


def encoded(tmp_path, flow_out, flow_in) -> bytes:
    """Two rows (a span and an instant inside it) through ``codec.encode`` with the given
    flow columns."""
    import numpy as np

    def a(values, dtype):
        return np.array(values, dtype)

    path = tmp_path / "flows.pftrace"
    with open(path, "wb") as sink:
        codec.encode(
            sink.fileno(), b"", 1 << 16,
            a([100, 150], np.int64), a([100, 0], np.int64), a([0, 1], np.int32),
            a([1, 2], np.uint64), a([0, 1], np.uint64), a([0, 1], np.uint8),
            a([0, 0], np.int64), a([0, 0], np.uint8), a([0, 0], np.uint8),
            flow_out, flow_in,
            a([0, 0], np.int32), a([-1, -1], np.int32), a([0, 0], np.int32),
            a([0, 0], np.int32), a([0], np.int32), [b"a"], [], [b"t"], 2,
        )  # fmt: skip
    return path.read_bytes()


def test_no_flow_columns_write_what_columns_of_zeros_write(tmp_path):
    """A table without flows (most) hands the encoder empty flow columns, which it then
    never reads: the same bytes as columns of zeros; a flow still comes out where one is."""
    import numpy as np

    zeros = encoded(tmp_path, np.zeros(2, np.uint64), np.zeros(2, np.uint64))
    assert encoded(tmp_path, np.zeros(0, np.uint64), np.zeros(0, np.uint64)) == zeros
    one = encoded(tmp_path, np.array([7, 0], np.uint64), np.zeros(2, np.uint64))
    assert b"\xf9\x02" + (7).to_bytes(8, "little") in one and len(one) == len(zeros) + 10


def test_flow_columns_of_another_length_are_refused(tmp_path):
    import numpy as np

    with pytest.raises(ValueError, match="a value per row, or none"):
        encoded(tmp_path, np.zeros(2, np.uint64), np.zeros(0, np.uint64))


# --------------------------------------------------------------------------- both paths, any bytes


def outcome(path, fast: bool):
    """What the decoder makes of a file: its columns and tables, or its error."""
    decoder = codec.Decoder(fast)
    with open(path, "rb") as stream:
        try:
            decoder.read(stream.fileno(), 1 << 12, os.fstat(stream.fileno()).st_size)
        except codec.CodecError as exc:
            return ("refused", str(exc))
    columns = {key: value.tobytes() for key, value in decoder.columns().items()}
    tables = (
        decoder.names,
        decoder.categories,
        decoder.renamed,
        decoder.processes,
        decoder.threads,
    )
    return ("read", columns, tables)


def test_the_fast_path_reads_any_bytes_as_the_general_path_does(tmp_path):
    """A differential fuzz: our trace with one event packet damaged (a byte changed, one
    added or one taken out, the packet re-framed so the damage is inside it) decodes to
    the same columns, or the same refusal, with the fast path as without it."""
    import random

    from conftest import build_spans

    source = tmp_path / "small.pftrace"
    export(build_spans(seed=3, roots_per_thread=1, longest_root_ns=3000), source)
    bodies = packets(source.read_bytes())
    events = [k for k, p in enumerate(bodies) if is_event(p)]
    rng = random.Random(35)
    path = tmp_path / "damaged.pftrace"
    kinds = {"read": 0, "refused": 0}
    for _ in range(400):
        k = rng.choice(events)
        body = bytearray(bodies[k])
        at = rng.randrange(len(body))
        how = rng.randrange(3)
        if how == 0:
            body[at] = rng.choice([rng.randrange(256), body[at] ^ 1, 0x80 | body[at]])
        elif how == 1:
            body.insert(at, rng.randrange(256))
        else:
            del body[at]
        damaged = bodies[:k] + [bytes(body)] + bodies[k + 1 :]
        path.write_bytes(b"".join(codec.packet(p) for p in damaged))
        fast = outcome(path, True)
        assert fast == outcome(path, False), (k, at, how)
        kinds[fast[0]] += 1
    assert kinds["read"] > 40 and kinds["refused"] > 40  # both kinds of outcome were met
