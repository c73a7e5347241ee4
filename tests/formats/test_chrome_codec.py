"""The Chrome JSON codec's reader: bounded blocks and bounded inflation, foreign clocks and
sources, what a load leaves out (said, counted, or refused), and a mutation fuzz."""

from __future__ import annotations

import gzip
import io
import gc
import json
import mmap
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import assert_same_spans, build_spans

from hotspan._schema import SPAN_SCHEMA
from hotspan.formats import TraceFileError, _chrome_json as chrome_json, export, load


def _write(path: Path, document) -> Path:
    path.write_text(json.dumps(document))
    return path


def _load_quietly(path: Path) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load(path)


# --------------------------------------------------------------------------- blocks


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_events_cut_by_every_block_boundary(spans, tmp_path, monkeypatch, block):
    """Fed a few bytes at a time, every event (and number, string, key) straddles a block
    boundary somewhere: the reader must carry the partial event over and read the same."""
    path = tmp_path / "trace.json"
    export(spans, path)
    expected = load(path)
    monkeypatch.setattr(chrome_json, "READ_BLOCK", block)
    assert_same_spans(expected, load(path))
    gz = tmp_path / "trace.json.gz"
    export(spans, gz)
    assert_same_spans(expected, load(gz))


def test_the_reader_needs_its_padding_after_the_data(tmp_path):
    """The reader loads 8 bytes at a time, up to 7 past the NUL that ends the data: a
    buffer without ``PAD`` bytes from its NUL on (or without the NUL) is refused, never
    read past its end."""
    from hotspan.formats import _chrome_codec as codec

    text = b'{"traceEvents":[{"ph":"X","ts":1,"dur":2,"pid":1,"tid":1,"name":"abcdefghijk"}]}'
    for data in (bytearray(text + b"\0"), bytearray(text + b"x" * codec.PAD)):
        with pytest.raises(ValueError, match="NUL"):
            codec.Reader(tmp_path / "t.json").feed(data, len(text), 0, True)
    reader = codec.Reader(tmp_path / "t.json")
    assert reader.feed(bytearray(text) + bytearray(codec.PAD), len(text), 0, True) == len(text)
    assert reader.n == 1 and reader.names.values == ["abcdefghijk"]


def test_a_gzip_bomb_is_refused_at_the_limit(tmp_path, monkeypatch):
    """64 MiB of blanks in a 64 KiB gzip: refused once the inflated bytes pass the limit,
    in bounded memory (the old loader inflated everything: GBs for a 2.4 MB file)."""
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as sink:
        sink.write(b"[")
        block = b" " * (1 << 20)
        for _ in range(64):
            sink.write(block)
        sink.write(b"]")
    assert path.stat().st_size < 1 << 20
    monkeypatch.setenv("HOTSPAN_MAX_INFLATED_BYTES", str(8 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(TraceFileError) as error:
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(error.value) and "inflates to more than 8,388,608 bytes" in str(
        error.value
    )
    assert "HOTSPAN_MAX_INFLATED_BYTES" in str(error.value)
    assert peak < 32 << 20
    # The limit per call, and a limit above the size: the blanks load as an empty trace.
    exporter = chrome_json.ChromeJsonGzExporter()
    with pytest.raises(TraceFileError):
        exporter.read(path, max_inflated_bytes=1 << 20)
    monkeypatch.delenv("HOTSPAN_MAX_INFLATED_BYTES")
    started = time.perf_counter()
    assert load(path).num_rows == 0
    assert time.perf_counter() - started < 30


def test_a_bad_limit_in_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b"[]"))
    monkeypatch.setenv("HOTSPAN_MAX_INFLATED_BYTES", "lots")
    with pytest.raises(ValueError, match="HOTSPAN_MAX_INFLATED_BYTES"):
        load(path)


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"[" * 100_000, "nested deeper than 256"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "args": ' + b"[" * 5000 + b"]" * 5000 + b"}]}",
            "nested deeper",
        ),
        (b'{"traceEvents": [{"ph": "X", "ts": 1e400}]}', "out of range"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 99999999999999999999999}]}',
            "out of range",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "pid": 99999999999999999999}]}',
            "pid out of range",
        ),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "tid": 1.5}]}', "tid is neither"),
        (b'{"traceEvents": [{"ph": "X", "ts": true}]}', "'ts' is not a finite number: true"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": "long"}]}', "'dur' is not a finite number"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "name": "a\x01b"}]}', "control character"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "name": "\\q"}]}', "invalid escape"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "name": "\xc3("}]}', "utf-8"),
        (b'{"traceEvents": []} {}', "nothing more"),
        (b'{"traceEvents": [], }', "a key"),
        (b'{"traceEvents": [{"ph": "B", "ts": 5}, {"ph": "E", "ts": 4}]}', "earlier than its 'b'"),
        (b"7", "not a chrome trace"),
        (b"   \n\t ", "empty file"),
    ],
)
def test_bad_documents_are_refused_clearly(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFileError) as error:
        load(path)
    assert str(path) in str(error.value)
    assert problem.lower() in str(error.value).lower()
    with pytest.raises(TraceFileError) as mapped_error:  # the same words, mapped
        _load_mapped(path)
    assert str(mapped_error.value) == str(error.value)


# --------------------------------------------------------------------------- mapped files


def _load_mapped(path: Path) -> pa.Table:
    """``load(path)`` with the file mapped whatever its size (a large one is, a small one is
    read a block at a time)."""
    codec = chrome_json.codec
    real, saved, mapped = codec.MappedText, chrome_json.MAP_FROM, []

    def mapping(fd: int, length: int):
        mapped.append(length)
        return real(fd, length)

    chrome_json.MAP_FROM, codec.MappedText = 0, mapping
    try:
        return _load_quietly(path)
    finally:
        chrome_json.MAP_FROM, codec.MappedText = saved, real
        # a gzip file is inflated a block at a time
        assert mapped == ([] if path.read_bytes()[:2] == b"\x1f\x8b" else [os.path.getsize(path)])


def _load_read(path: Path) -> pa.Table:
    saved = chrome_json.MAP_FROM
    chrome_json.MAP_FROM = 1 << 62
    try:
        return _load_quietly(path)
    finally:
        chrome_json.MAP_FROM = saved


@pytest.mark.parametrize("form", ["ours", "array cut"])
def test_a_mapped_file_reads_as_a_read_one_whatever_its_length_in_pages(spans, tmp_path, form):
    """The reader needs a NUL and padding after the data: a mapped file has its last part
    page copied, with zeros after it; a file of whole pages has none of its own. Every end
    around a page boundary reads as the file read a block at a time."""
    page = mmap.PAGESIZE
    source = tmp_path / "source.json"
    export(spans, source)
    text = source.read_bytes()
    if form == "array cut":  # the array form, ending mid-event (a tracer killed)
        events = json.loads(text)["traceEvents"]
        text = json.dumps(events, separators=(",", ":")).encode()[:-40]
    body = text.rstrip()
    pages = len(body) // page + 1
    for extra in (-1, 0, 1, 7, 31, 32, 33, page - 1):
        size = pages * page + extra
        path = tmp_path / f"trace{extra}.json"
        path.write_bytes(body + b" " * (size - len(body)))  # blanks after the document
        assert path.stat().st_size == size
        read = _load_read(path)
        assert read.num_rows > 0
        assert _load_mapped(path).equals(read, check_metadata=True), extra
    if form == "ours":  # and cut at a page boundary: the same refusal
        path = tmp_path / "cut.json"
        path.write_bytes(body[: (pages - 1) * page])
        with pytest.raises(TraceFileError) as error:
            _load_read(path)
        with pytest.raises(TraceFileError) as mapped_error:
            _load_mapped(path)
        assert str(mapped_error.value) == str(error.value)


def test_a_mapped_read_sees_only_the_length_it_was_given(tmp_path):
    """Bytes after the length (appended while the file is read) are not seen, even in
    the same page: the zeros after the data are the reader's own."""
    from hotspan.formats import _chrome_codec as codec

    text = b'{"traceEvents":[{"ph":"X","ts":1,"dur":2,"pid":1,"tid":1,"name":"abc"}]}'
    path = tmp_path / "t.json"
    path.write_bytes(text + b"garbage that is not JSON" * 10)
    with open(path, "rb") as file:
        mapped = codec.MappedText(file.fileno(), len(text))
        reader = codec.Reader(path)
        assert reader.feed_text(mapped) == len(text)
        assert reader.n == 1 and reader.names.values == ["abc"]
        mapped.close()
        with pytest.raises(ValueError, match="closed"):
            codec.Reader(path).feed_text(mapped)


def _own_file(spans, tmp_path: Path) -> Path:
    path = tmp_path / "trace.json"
    export(spans, path)
    assert path.stat().st_size > 8 * mmap.PAGESIZE
    return path


def test_a_file_cut_shorter_while_it_is_read_is_refused_not_a_crash(spans, tmp_path):
    """A job rewriting its trace in place (``open(path, "w")``) while a load reads it: the
    pages past the new end fault (SIGBUS, which ends a process). They read as zeros
    instead, and the load refuses the file in one line naming it."""
    from hotspan.formats import _chrome_codec as codec

    path = _own_file(spans, tmp_path)
    size = path.stat().st_size
    for keep in (0, 3 * mmap.PAGESIZE + 5, size - mmap.PAGESIZE):
        with open(path, "rb") as file:
            text = codec.MappedText(file.fileno(), size)
            os.truncate(path, keep)
            reader = codec.Reader(path)
            with pytest.raises(
                TraceFileError, match="got shorter than its .* bytes while it was read"
            ):
                reader.feed_text(text)
            assert text.cut
            text.close()
        export(spans, path)  # whole again

    # The same through load: cut right after it is mapped.
    real = codec.MappedText

    def mapped_then_cut(fd: int, length: int):
        text = real(fd, length)
        os.truncate(path, length // 2)
        return text

    saved, chrome_json.MAP_FROM, codec.MappedText = chrome_json.MAP_FROM, 0, mapped_then_cut
    try:
        with pytest.raises(TraceFileError) as error:
            load(path)
    finally:
        chrome_json.MAP_FROM, codec.MappedText = saved, real
    assert str(error.value).startswith(f"{path}: the file got shorter")
    export(spans, path)
    with open(path, "rb") as file:  # a whole file is not cut
        text = codec.MappedText(file.fileno(), path.stat().st_size)
        codec.Reader(path).feed_text(text)
        assert not text.cut


def test_a_load_reads_a_file_it_cannot_map(spans, tmp_path):
    """At most 64 files are mapped at a time (the fault handler's slots); past that a load
    reads its file a block at a time, to the same table."""
    from hotspan.formats import _chrome_codec as codec

    path = _own_file(spans, tmp_path)
    expected = _load_read(path)
    gc.collect()  # texts of earlier tests not closed, let go
    with open(path, "rb") as file:
        held = []
        with pytest.raises(OSError, match="too many files mapped at once"):
            for _ in range(65):
                held.append(codec.MappedText(file.fileno(), 2 * mmap.PAGESIZE))
        assert 0 < len(held) <= 64
        saved, chrome_json.MAP_FROM = chrome_json.MAP_FROM, 0
        try:
            assert _load_quietly(path).equals(expected, check_metadata=True)
        finally:
            chrome_json.MAP_FROM = saved
            for text in held:
                text.close()
    assert _load_mapped(path).equals(expected, check_metadata=True)  # the slots free again


_OTHER_SIGBUS = """
import faulthandler, mmap, os, sys
from hotspan.formats import _chrome_codec as codec
path, before, reader = sys.argv[1:]
if before == "faulthandler":
    faulthandler.enable()
if reader == "mapped":  # the reader's handler installed
    with open(path, "rb") as file:
        codec.MappedText(file.fileno(), os.path.getsize(path)).close()
if before == "after":  # then the reader again: its handler not installed over this one
    faulthandler.enable()
    if reader == "mapped":
        with open(path, "rb") as file:
            codec.MappedText(file.fileno(), os.path.getsize(path)).close()
with open(path, "r+b") as file:
    other = mmap.mmap(file.fileno(), 0)
    os.truncate(path, 0)
    print("read", other[len(other) - 1], flush=True)  # faults: not a file hotspan reads
"""


@pytest.mark.parametrize("before", ["none", "faulthandler", "after"])
def test_a_fault_in_memory_the_reader_did_not_map_still_ends_the_process(tmp_path, before):
    """The reader's SIGBUS handler takes only faults in the files it reads: any other goes
    on as it would have without it (the handler there before, else the default action),
    whatever was installed first: the same program without the reader's handler ends the
    same way (SIGBUS; faulthandler's report; a sanitizer's). faulthandler enabled after it
    passes faults on to it: the reader's handler installed over faulthandler again would
    pass them back, a loop (a hang, the report printed without end)."""
    path = tmp_path / "other.bin"
    endings = []
    for reader in ("mapped", "none"):
        path.write_bytes(b"x" * (4 * mmap.PAGESIZE))
        done = subprocess.run(
            [sys.executable, "-c", _OTHER_SIGBUS, str(path), before, reader],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "read" not in done.stdout, done.stdout
        reported = [
            line
            for line in ("Fatal Python error: Bus error", "DEADLYSIGNAL")
            if line in done.stderr
        ]
        endings.append((done.returncode, reported))
    assert endings[0] == endings[1], endings
    returncode, reported = endings[0]
    # killed by the signal, unless a sanitizer's handler (there before) exits with its code
    if "DEADLYSIGNAL" in reported:
        assert returncode > 0, endings
    else:
        assert returncode == -signal.SIGBUS, endings
    if before != "none":
        assert "Fatal Python error: Bus error" in reported


def test_a_file_shorter_than_its_length_is_refused_not_mapped(tmp_path):
    """A file cut shorter between its size and its mapping: its pages past the new end
    would fault when read, so it is refused; and only a regular file is mapped."""
    from hotspan.formats import _chrome_codec as codec

    path = tmp_path / "t.json"
    path.write_bytes(b"[" + b" " * (3 * mmap.PAGESIZE))
    with open(path, "rb") as file:
        for length in (path.stat().st_size + 1, 5 * mmap.PAGESIZE):
            with pytest.raises(OSError, match="shorter than the"):
                codec.MappedText(file.fileno(), length)
    with open(os.devnull, "rb") as device:
        with pytest.raises(OSError, match="not a regular file"):
            codec.MappedText(device.fileno(), 0)


# --------------------------------------------------------------------------- foreign clocks and sources


def _torch_trace(base_ns: int = 1_732_000_000_123_456_000, rank: int = 3) -> dict:
    """A torch.profiler (Kineto) trace as its chrome exporter lays it out: schemaVersion,
    deviceProperties and distributedInfo first, ts in microseconds (three decimals) since
    baseTimeNanoseconds (written last), CPU ops on the host thread, kernels on a stream,
    flow events (ac2g) between them."""
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85_000_000_000}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8},
        "record_shapes": 0,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#2",
                "pid": 4242,
                "tid": 4242,
                "ts": 10.500,
                "dur": 1000.250,
                "args": {"External id": 1, "Record shapes": []},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 4242,
                "tid": 4242,
                "ts": 20.125,
                "dur": 50.000,
                "args": {"External id": 2, "Sequence number": 7, "Fwd thread id": 0},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 4242,
                "tid": 4242,
                "ts": 30.000,
                "dur": 5.001,
                "args": {"correlation": 11, "cbid": 211},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ampere_sgemm_128x64_nn",
                "pid": 0,
                "tid": 7,
                "ts": 40.000,
                "dur": 20.002,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": 11,
                    "grid": [1, 1, 1],
                    "block": [256, 1, 1],
                },
            },
            {
                "ph": "s",
                "id": 11,
                "pid": 4242,
                "tid": 4242,
                "ts": 30.000,
                "cat": "ac2g",
                "name": "ac2g",
            },
            {
                "ph": "f",
                "id": 11,
                "pid": 0,
                "tid": 7,
                "ts": 40.000,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            },
            {
                "name": "process_name",
                "ph": "M",
                "ts": 0,
                "pid": 4242,
                "tid": 0,
                "args": {"name": "python3"},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "ts": 0,
                "pid": 4242,
                "tid": 4242,
                "args": {"name": "thread 4242 (python3)"},
            },
            {
                "name": "process_name",
                "ph": "M",
                "ts": 0,
                "pid": 0,
                "tid": 0,
                "args": {"name": "GPU 0"},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "ts": 0,
                "pid": 0,
                "tid": 7,
                "args": {"name": "stream 7 "},
            },
            {
                "ph": "i",
                "s": "t",
                "name": "Iteration Start: PyTorch Profiler",
                "pid": 4242,
                "tid": 4242,
                "ts": 10.500,
            },
        ],
        "traceName": "/tmp/rank3.pt.trace.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
    }


def test_a_torch_profiler_trace_lands_on_the_epoch(tmp_path):
    base = 1_732_000_000_123_456_000
    path = _write(tmp_path / "rank3.pt.trace.json", _torch_trace(base))
    table = load(path)
    assert table.schema.metadata[b"hotspan.source"] == b"torch.profiler"
    rows = {row["name"]: row for row in table.to_pylist()}
    assert set(rows) == {
        "ProfilerStep#2",
        "aten::mm",
        "cudaLaunchKernel",
        "ampere_sgemm_128x64_nn",
        "Iteration Start: PyTorch Profiler",
    }
    step = rows["ProfilerStep#2"]
    assert (step["start_ns"], step["duration_ns"]) == (base + 10_500, 1_000_250)
    assert rows["aten::mm"]["parent_id"] == step["span_id"] and rows["aten::mm"]["depth"] == 1
    assert rows["cudaLaunchKernel"]["duration_ns"] == 5_001
    kernel = rows["ampere_sgemm_128x64_nn"]
    assert (kernel["pid"], kernel["thread_id"], kernel["thread_name"]) == (0, 7, "stream 7 ")
    assert kernel["start_ns"] == base + 40_000 and kernel["depth"] == 0
    assert {row["rank"] for row in rows.values()} == {3}  # distributedInfo.rank
    assert rows["Iteration Start: PyTorch Profiler"]["duration_ns"] == 0


def test_plain_chrome_traces_say_so(tmp_path):
    path = _write(tmp_path / "plain.json", [{"ph": "X", "ts": 1, "dur": 2, "name": "a"}])
    assert load(path).schema.metadata[b"hotspan.source"] == b"chrome"
    ours = tmp_path / "ours.json"
    export(build_spans(roots_per_thread=1), ours)
    assert b"hotspan.source" not in load(ours).schema.metadata


def test_async_events_load_as_spans_on_their_own_track(tmp_path):
    events = [
        {"ph": "X", "ts": 0, "dur": 100, "pid": 1, "tid": 1, "name": "main"},
        {"ph": "b", "ts": 10, "pid": 1, "tid": 1, "cat": "net", "id": "0x1", "name": "request"},
        {"ph": "b", "ts": 15, "pid": 1, "tid": 1, "cat": "net", "id": "0x2", "name": "request"},
        {"ph": "n", "ts": 20, "pid": 1, "tid": 1, "cat": "net", "id": "0x1", "name": "headers"},
        {
            "ph": "e",
            "ts": 150,
            "pid": 1,
            "tid": 2,
            "cat": "net",
            "id": "0x1",
            "name": "request",
            "args": {"arg": 512},
        },
        {"ph": "e", "ts": 30, "pid": 1, "tid": 2, "cat": "net", "id": "0x2", "name": "request"},
        {
            "ph": "b",
            "ts": 40,
            "pid": 1,
            "tid": 1,
            "cat": "net",
            "id": "0x3",
            "name": "never answered",
        },
        {"ph": "e", "ts": 50, "pid": 1, "tid": 1, "cat": "net", "id": "0x9", "name": "stray"},
    ]
    path = _write(tmp_path / "async.json", {"traceEvents": events})
    with pytest.warns(UserWarning, match="async 'b' event.s. never closed") as caught:
        table = load(path)
    assert str(path) in str(caught[0].message)
    rows = table.to_pylist()
    main = next(r for r in rows if r["name"] == "main")
    assert main["thread_name"] == "thread 1" and main["depth"] == 0
    requests = sorted((r for r in rows if r["name"] == "request"), key=lambda r: r["start_ns"])
    assert [(r["start_ns"], r["end_ns"]) for r in requests] == [(10_000, 150_000), (15_000, 30_000)]
    assert {r["thread_name"] for r in requests} == {"async net"}
    assert requests[0]["arg"] == 512 and requests[1]["parent_id"] == requests[0]["span_id"]
    assert requests[0]["thread_id"] != main["thread_id"]
    assert skipped(table) == {
        "async 'b' event(s) never closed by an 'e'": 1,
        "async 'e' event(s) closing no 'b'": 1,
    }


# --------------------------------------------------------------------------- what a load leaves out


def skipped(table) -> dict:
    """What the load left out, by reason (formats.base.note_skipped's metadata)."""
    return json.loads(table.schema.metadata[b"hotspan.skipped_on_load"])["reasons"]


def test_b_events_never_closed_are_said_and_counted(tmp_path):
    events = [{"ph": "X", "ts": 0, "dur": 10, "name": "done"}]
    events += [{"ph": "B", "ts": i, "name": "open"} for i in range(1000)]
    events += [{"ph": "E", "ts": 5000, "tid": 9}]
    path = _write(tmp_path / "open.json", events)
    with pytest.warns(UserWarning) as caught:
        table = load(path)
    message = str(caught[0].message)
    assert (
        "1,000 'B' event(s) never closed" in message and "1 'E' event(s) closing no 'B'" in message
    )
    assert table.num_rows == 1
    assert skipped(table) == {
        "'B' event(s) never closed by an 'E'": 1000,
        "'E' event(s) closing no 'B'": 1,
    }


def test_nothing_but_unclosed_b_events_is_refused(tmp_path):
    path = _write(
        tmp_path / "open.json", [{"ph": "B", "ts": i, "name": "open"} for i in range(10_000)]
    )
    with pytest.raises(TraceFileError, match="no complete span.*10,000 'B' event"):
        load(path)


def test_event_lines_cut_out_of_our_file_are_said(spans, tmp_path):
    path = tmp_path / "trace.json"
    export(spans, path)
    lines = path.read_bytes().split(b"\n")
    events = [i for i, line in enumerate(lines) if line.startswith(b'{"ph":"X"')]
    for i in sorted(events[10:15], reverse=True):
        del lines[i]
    path.write_bytes(b"\n".join(lines))
    with pytest.warns(UserWarning, match="5 span event.s. missing"):
        table = load(path)
    assert table.num_rows == spans.num_rows - 5
    assert skipped(table) == {"span event(s) missing from the file (lines cut out?)": 5}
    # The metadata of the file is still there.
    assert table.schema.metadata[b"hotspan.host"] == b"node-07.example"


def test_an_array_form_trace_cut_mid_event(tmp_path):
    text = json.dumps([{"ph": "X", "ts": i, "dur": 1, "name": "x"} for i in range(10)])
    path = tmp_path / "cut.json"
    path.write_text(text[: text.rindex("{") + 12])  # a tracer killed while writing
    with pytest.warns(UserWarning, match="1 event cut by the end of the file"):
        table = load(path)
    assert table.num_rows == 9


def test_a_complete_load_says_nothing(spans, tmp_path):
    path = tmp_path / "trace.json"
    export(spans, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = load(path)
    assert b"hotspan.skipped_on_load" not in table.schema.metadata


# --------------------------------------------------------------------------- mutation fuzz


def _seeds(tmp_path: Path) -> dict[str, bytes]:
    ours = tmp_path / "ours.json"
    export(build_spans(seed=5, roots_per_thread=1, longest_root_ns=2000), ours)
    multi = []
    for rank in range(2):
        multi.append(
            {
                "ph": "M",
                "pid": 0,
                "tid": rank,
                "name": "thread_name",
                "args": {"name": f"Rank {rank}"},
            }
        )
        for step in range(4):
            t = 1000.5 + 200 * step + rank
            multi += [
                {
                    "ph": "X",
                    "pid": 0,
                    "tid": rank,
                    "ts": t,
                    "dur": 100.25,
                    "name": "step",
                    "args": {"rank": rank},
                },
                {"ph": "B", "pid": 0, "tid": rank, "ts": t + 1, "name": "compute", "cat": "c"},
                {"ph": "E", "pid": 0, "tid": rank, "ts": t + 50},
                {"ph": "i", "s": "t", "pid": 0, "tid": rank, "ts": t + 60, "name": "mark"},
            ]
    return {
        "ours": ours.read_bytes(),
        "multi-rank": json.dumps({"traceEvents": multi, "displayTimeUnit": "ms"}).encode(),
        "torch": json.dumps(_torch_trace(), indent=1).encode(),
        "array": json.dumps(multi).encode(),
    }


_WRONG = [
    b'"x"',
    b"[]",
    b"{}",
    b"true",
    b"null",
    b"1e999",
    b"-1",
    b"18446744073709551616",
    b"0.5",
    b'"\\ud800"',
]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    how = rng.choice(["cut", "flip", "delete", "nest", "wrong type", "duplicate"])
    at = rng.randrange(len(data))
    if how == "cut":
        return data[:at]
    if how == "flip":
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    if how == "delete":
        return data[:at] + data[at + rng.randrange(1, 40) :]
    if how == "nest":
        depth = rng.choice([10, 300, 5000])
        return data[:at] + b"[" * depth + b"]" * depth + data[at:]
    if how == "duplicate":
        return data[:at] + data[at : at + rng.randrange(1, 200)] + data[at:]
    # A value of the wrong type after some colon.
    colons = [i for i in range(len(data)) if data[i] == ord(":")]
    if not colons:
        return data
    start = rng.choice(colons) + 1
    end = start
    while end < len(data) and data[end] not in b",}]":
        end += 1
    return data[:start] + rng.choice(_WRONG) + data[end:]


def test_mutation_fuzz(tmp_path):
    """Hundreds of damaged files (cut, flipped, deleted, nested, wrong types; plain and
    gzip): each loads as a valid span table or is refused with a ValueError/OSError naming
    the file; never a crash, a hang or another exception."""
    rng = random.Random(20261130)
    seeds = _seeds(tmp_path)
    started = time.perf_counter()
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(400):
        kind = rng.choice(list(seeds))
        data = _mutate(seeds[kind], rng)
        gz = rng.random() < 0.2
        path = tmp_path / (f"m{i}.json.gz" if gz else f"m{i}.json")
        if gz:
            data = gzip.compress(data)
            if rng.random() < 0.3:
                data = data[: rng.randrange(len(data))]
        path.write_bytes(data)
        try:
            table = _load_quietly(path)
        except (ValueError, OSError) as error:
            assert str(path) in str(error), (kind, str(error))
            outcomes["refused"] += 1
            if not gz:  # mapped, not read: the same words
                with pytest.raises(type(error)) as mapped_error:
                    _load_mapped(path)
                assert str(mapped_error.value) == str(error)
        else:
            assert table.schema.remove_metadata() == SPAN_SCHEMA.remove_metadata()
            table.validate(full=True)
            outcomes["loaded"] += 1
            if not gz:
                assert _load_mapped(path).equals(table, check_metadata=True)
        path.unlink()
    assert outcomes["loaded"] > 20 and outcomes["refused"] > 100, outcomes
    assert time.perf_counter() - started < 60


def test_lone_surrogate_escapes_become_replacement_text(tmp_path):
    """JSON allows "\\ud800"; Arrow strings must be UTF-8: such text loads as "?"."""
    path = tmp_path / "surrogates.json"
    path.write_text(
        '[{"ph":"M","name":"thread_name","pid":"\\ud800","tid":1,"args":{"name":"x"}},'
        '{"ph":"X","ts":1,"dur":1,"pid":"\\ud800","tid":1,"name":"a\\udc00b"}]'
    )
    table = load(path)
    table.validate(full=True)
    row = table.to_pylist()[0]
    assert (row["name"], row["thread_name"]) == ("a?b", "x")


# --------------------------------------------------------------------------- writer


@pytest.mark.parametrize("block", [1, 300, 1 << 20])
def test_the_writer_gives_the_same_bytes_in_any_block_size_and_through_gzip(
    spans, tmp_path, monkeypatch, block
):
    """The lines go straight to the file descriptor a block at a time (two buffers, a
    writer thread); through gzip they go to a Python stream: the same bytes either way,
    however many blocks (a tiny block: one line a block)."""
    monkeypatch.setattr(chrome_json, "WRITE_BLOCK", block)
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    export(spans, plain)
    export(spans, packed)
    assert plain.read_bytes() == gzip.decompress(packed.read_bytes())
    assert plain.read_bytes().count(b'\n{"ph":"') == spans.num_rows
    assert_same_spans(spans, load(plain), keep_order=False)


@pytest.mark.parametrize("extension", [".json", ".pftrace"])
@pytest.mark.parametrize("order", ["shuffled", "reversed", "by start"])
def test_the_row_order_of_the_table_does_not_change_the_file(spans, tmp_path, extension, order):
    """The codecs sort the rows into trace order themselves: any permutation of the table's
    rows writes the same file. The table comes in drain order (per thread by end time):
    rows by start (already sorted), reversed (the most moves: the insertion sort gives up
    at once) or shuffled (it gives up half way, the radix sort finishes from there) take
    the other ways through the sort."""
    export(spans, tmp_path / f"a{extension}")
    n = spans.num_rows
    rows = {
        "shuffled": random.Random(4).sample(range(n), n),
        "reversed": list(range(n - 1, -1, -1)),
        "by start": pc.sort_indices(
            spans, [("thread_id", "ascending"), ("start_ns", "ascending")]
        ).to_pylist(),
    }[order]
    export(spans.take(pa.array(rows)), tmp_path / f"b{extension}")
    assert (tmp_path / f"a{extension}").read_bytes() == (tmp_path / f"b{extension}").read_bytes()


@pytest.mark.parametrize("extension", [".json", ".pftrace"])
def test_starts_too_far_apart_for_one_sort_key_keep_the_trace_order(spans, tmp_path, extension):
    """Thread, start and rank packed in one 64-bit key is how the codecs sort; starts ~2^62
    ns apart leave no room for it, and the rows go through numpy's general sort (each row's
    rank made then): a shuffled table still writes the file its rows in trace order do."""
    import numpy as np

    starts = spans.column("start_ns").to_numpy()
    thread_ids = spans.column("thread_id").to_numpy()
    far = (starts - starts.min()) + ((thread_ids == thread_ids[0]).astype(np.int64) << 62)
    shifted = spans.set_column(
        spans.schema.get_field_index("start_ns"), "start_ns", pa.array(far, pa.int64())
    ).set_column(
        spans.schema.get_field_index("end_ns"),
        "end_ns",
        pa.array(far + spans.column("duration_ns").to_numpy(), pa.int64()),
    )
    assert len(set(shifted.column("thread_id").to_pylist())) > 1 and far.max() > 1 << 62
    in_order = pc.sort_indices(shifted, [("thread_id", "ascending"), ("start_ns", "ascending")])
    shuffled = random.Random(7).sample(range(spans.num_rows), spans.num_rows)
    export(shifted.take(in_order), tmp_path / f"a{extension}")
    export(shifted.take(pa.array(shuffled)), tmp_path / f"b{extension}")
    assert (tmp_path / f"a{extension}").read_bytes() == (tmp_path / f"b{extension}").read_bytes()
    assert_same_spans(shifted, load(tmp_path / f"b{extension}"), keep_order=False)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_failed_write_is_an_os_error(spans):
    """A write that fails (the disk is full) reaches the caller as OSError, from the writer
    thread, and nothing hangs."""
    import numpy as np

    from hotspan.formats import _chrome_codec as codec

    n = 1000
    i64, u64, u8, i32 = (np.arange(n, dtype=t) for t in (np.int64, np.uint64, np.uint8, np.int32))
    with open("/dev/full", "wb", buffering=0) as full, pytest.raises(OSError) as caught:
        codec.encode(
            full.fileno(),
            4096,
            i64,
            i64 + 1,
            i32 * 0,
            u64 + 1,
            u64,
            u8 * 0,
            i64,
            u8 * 0,
            u8 * 0,
            i32 * 0,
            i32 * 0,
            i32 * 0 - 1,
            i32 * 0 - 1,
            [b',"pid":1,"tid":1'],
            [b',"name":"x"'],
            [],
            [],
            0,
        )
    assert caught.value.errno == 28  # ENOSPC


def _dirty_pages(fd: int) -> int:
    """The file's dirty page-cache pages (Linux's cachestat(2), 6.5 and later)."""
    import ctypes
    import errno

    class Range(ctypes.Structure):
        _fields_ = [("offset", ctypes.c_uint64), ("length", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_uint64)
            for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")
        ]

    libc = ctypes.CDLL(None, use_errno=True)
    whole, stat = Range(0, 0), Stat()
    if libc.syscall(451, fd, ctypes.byref(whole), ctypes.byref(stat), 0) != 0:  # cachestat
        number = ctypes.get_errno()
        if number in (errno.ENOSYS, errno.EPERM):
            pytest.skip("this kernel has no cachestat(2) (Linux 6.5 and later)")
        raise OSError(number, os.strerror(number))
    return stat.dirty


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_lines_are_on_their_way_to_disk_when_encode_returns(tmp_path):
    """The writer thread starts the writeback of each block as soon as it has written it
    (sync_file_range), so the exporter's fsync() finds little left to do: when ``encode``
    returns, before any fsync, hardly a page of the file is still dirty (the kernel would
    otherwise keep them dirty for its 30 s)."""
    n = 300_000  # ~25 MB of lines, in 1 MiB blocks
    with open(tmp_path / "lines.json", "wb", buffering=0) as raw:
        _encode_rows(raw.fileno(), [0] * n, range(n), [1] * n, [0] * n, buffer_size=1 << 20)
        size = raw.seek(0, 2)
        dirty = _dirty_pages(raw.fileno())
    assert size > 20 << 20
    assert dirty * os.sysconf("SC_PAGE_SIZE") < size // 10, (dirty, size)


@pytest.mark.parametrize("extension", [".json", ".pftrace"])
def test_a_sliced_table_writes_what_its_rows_hold(spans, tmp_path, extension):
    """A slice of a table (its arrays at an offset that is no multiple of 8, their null
    parents and args read from the validity bitmap as it is) writes the same file as a copy
    of the same rows, and loads back as them."""
    sliced = spans.slice(5, 3001)
    copied = sliced.take(pa.array(range(sliced.num_rows)))
    assert sliced.column("parent_id").chunk(0).offset == 5
    assert sliced.column("parent_id").null_count and sliced.column("arg").null_count
    export(sliced, tmp_path / f"a{extension}")
    export(copied, tmp_path / f"b{extension}")
    assert (tmp_path / f"a{extension}").read_bytes() == (tmp_path / f"b{extension}").read_bytes()
    back = load(tmp_path / f"a{extension}", check=False)
    assert sorted(back.column("arg").to_pylist(), key=str) == sorted(
        sliced.column("arg").to_pylist(), key=str
    )


def test_a_gzipped_export_is_the_same_bytes_every_time(spans, tmp_path):
    """The gzip header holds no time and no file name (the export writes a temporary file
    of a random name first): exporting one table twice gives the same bytes."""
    export(spans, tmp_path / "a.json.gz")
    first = (tmp_path / "a.json.gz").read_bytes()
    export(spans, tmp_path / "a.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == first
    assert first[3] & 0x08 == 0  # FNAME: not set


def _encode_rows(sink, thread, start, duration, depth, *, buffer_size=4096):
    """Rows with no parent, arg or flow through ``codec.encode``; span ids 1..n in row order."""
    import numpy as np

    from hotspan.formats import _chrome_codec as codec

    n = len(thread)
    zeros8, zeros64 = np.zeros(n, np.uint8), np.zeros(n, np.int64)
    codec.encode(
        sink,
        buffer_size,
        np.asarray(start, np.int64),
        np.asarray(duration, np.int64),
        np.asarray(depth, np.int32),
        np.arange(1, n + 1, dtype=np.uint64),
        np.zeros(n, np.uint64),
        zeros8,
        zeros64,
        zeros8,
        zeros8,
        np.asarray(thread, np.int32),
        np.zeros(n, np.int32),
        np.full(n, -1, np.int32),
        np.full(n, -1, np.int32),
        [f',"pid":1,"tid":{t}'.encode() for t in range(max(thread) + 1)],
        [b',"name":"x"'],
        [],
        [],
        0,
    )


@pytest.mark.parametrize("sink", ["stream", "file", "pipe"])
def test_each_thread_is_put_in_trace_order_as_the_writing_reaches_it(tmp_path, sink):
    """The writer sorts one thread's rows at a time, just before it writes them (so the
    first block reaches the disk while the other threads are not sorted yet): a thread in
    drain order (the insertion sort), one shuffled (too far for it: the radix sort), one
    in order, and a thread code no row has, with blocks of a few lines that end inside a
    thread and across threads, give the rows in (thread, start, depth, instant first)
    order, every row once."""
    import os
    import threading

    import numpy as np

    rng = random.Random(11)
    thread, start, duration, depth = [], [], [], []

    def row(t, s, d, level):
        thread.append(t)
        start.append(s)
        duration.append(d)
        depth.append(level)

    for k in range(500):  # thread 3: a parent recorded after its child (drain order)
        row(3, 1000 * k + 10, 100, 1)
        row(3, 1000 * k, 500, 0)
        row(3, 1000 * k, 0, 1)  # an instant at its start: before the span of its depth
    shuffled = [(5 * rng.randrange(2000), rng.choice([0, 7])) for _ in range(3000)]
    for s, d in shuffled:  # thread 0: shuffled, ties in start among them
        row(0, s, d, rng.randrange(3))
    for k in range(700):  # thread 4: in order already; thread 1 and 2: no rows
        row(4, 3 * k, 2, 0)
    # the threads' rows mixed up, each thread's in its own order still
    labels = np.asarray(thread)
    slots = rng.sample(labels.tolist(), len(labels))
    per_thread = {k: iter(np.flatnonzero(labels == k).tolist()) for k in set(slots)}
    interleave = [next(per_thread[k]) for k in slots]
    columns = [np.asarray(c)[interleave] for c in (thread, start, duration, depth)]
    t, s, d, level = columns
    expected = np.lexsort(((d > 0).astype(np.int64), level, s, t)) + 1  # stable, as span ids

    if sink == "stream":
        out = io.BytesIO()
        _encode_rows(out, t, s, d, level, buffer_size=2000)
        data = out.getvalue()
    elif sink == "pipe":
        read_end, write_end = os.pipe()
        chunks: list[bytes] = []
        reader = threading.Thread(
            target=lambda: chunks.extend(iter(lambda: os.read(read_end, 1 << 16), b""))
        )
        reader.start()
        try:
            _encode_rows(write_end, t, s, d, level, buffer_size=2000)
        finally:
            os.close(write_end)
            reader.join(timeout=60)
            os.close(read_end)
        data = b"".join(chunks)
    else:
        path = tmp_path / "lines.json"
        with open(path, "wb", buffering=0) as raw:
            raw.write(b"[{}")  # a header: the lines start at an offset, as in an export
            _encode_rows(raw.fileno(), t, s, d, level, buffer_size=2000)
        data = path.read_bytes()[3:]
    ids = [json.loads(line)["args"]["span_id"] for line in data.decode().split(",\n")[1:]]
    assert ids == expected.tolist()


@pytest.mark.parametrize("extension", [".json", ".pftrace"])
def test_instants_closing_their_parent_are_found_whatever_the_ids(spans, tmp_path, extension):
    """The trace order puts an instant at its parent's last nanosecond before the parent's
    end; the parents are found by an array indexed by span id when the ids lie close
    together (a drained table's 1, 2, ...), else by a hash table: the table with ids 1, 2,
    ... and with the same ids spread far apart write their events in the same order (ids
    aside)."""
    import re

    import numpy as np

    ids = spans.column("span_id").to_numpy()
    parents = spans.column("parent_id")
    known = np.unique(ids)
    dense = np.searchsorted(known, ids).astype(np.uint64) + 1
    parent_values = parents.fill_null(0).to_numpy()
    at = np.minimum(np.searchsorted(known, parent_values), len(known) - 1)
    found = (known[at] == parent_values) & parents.is_valid().to_numpy(zero_copy_only=False)
    dense_parent = at.astype(np.uint64) + 1

    def with_ids(factor: int) -> pa.Table:
        table = spans.set_column(
            spans.schema.get_field_index("span_id"), "span_id", pa.array(dense * factor)
        )
        return table.set_column(
            table.schema.get_field_index("parent_id"),
            "parent_id",
            pa.array(dense_parent * factor, pa.uint64(), mask=~found),
        )

    near, far = with_ids(1), with_ids(1_000_003)
    rows = near.to_pylist()
    end = {row["span_id"]: row["start_ns"] + row["duration_ns"] for row in rows}
    assert any(  # instants at their parent's last nanosecond: what the lookup is for
        row["duration_ns"] == 0 and end.get(row["parent_id"]) == row["start_ns"] for row in rows
    )
    export(near, tmp_path / f"near{extension}")
    export(far, tmp_path / f"far{extension}")
    if extension == ".json":
        strip = re.compile(rb'"(span_id|parent_id)":\d+')
        near_bytes = strip.sub(b"", (tmp_path / "near.json").read_bytes())
        assert near_bytes == strip.sub(b"", (tmp_path / "far.json").read_bytes())
    else:
        order = [
            load(tmp_path / f"{name}.pftrace", check=False).column("span_id").to_numpy()
            for name in ("near", "far")
        ]
        assert np.array_equal(order[0] * 1_000_003, order[1])
