"""The streaming Perfetto reader: our own traces are read block by block (never falling
back to the whole-file reader), whatever the block size; others go to the whole-file one."""
from __future__ import annotations

import pytest

from conftest import assert_same_spans, build_spans

from hotspan.formats import export, load, perfetto
from hotspan.formats import base as _base


@pytest.mark.parametrize("block", [997, 4 << 20])
@pytest.mark.parametrize("batch_rows", [997, 1 << 20])
def test_streaming_reader_reads_our_traces(block, batch_rows, spans, tmp_path, monkeypatch):
    monkeypatch.setattr(_base, "BATCH_ROWS", batch_rows)
    path = tmp_path / "trace.pftrace"
    export(spans, path)
    monkeypatch.setattr(perfetto, "_READ_BLOCK", block)
    monkeypatch.setattr(perfetto.PerfettoExporter, "_read_whole",
                        staticmethod(lambda path: pytest.fail("fell back to the whole-file reader")))
    assert_same_spans(spans, load(path), keep_order=False)


def test_streaming_reader_matches_the_whole_file_reader(tmp_path):
    table = build_spans(seed=3, roots_per_thread=5)
    path = tmp_path / "trace.pftrace"
    export(table, path)
    streamed = perfetto._StreamReader(path).read()
    assert streamed is not None
    assert streamed.equals(perfetto.PerfettoExporter._read_whole(path))


def test_a_packet_outside_our_layout_goes_to_the_whole_file_reader(spans, tmp_path, monkeypatch):
    path = tmp_path / "trace.pftrace"
    export(spans, path)
    data = path.read_bytes()
    # An extra event packet with the fields in another order (track uuid before type).
    body = b"\x40\x05" + b"\x5a\x04\x58\x01\x48\x03"
    path.write_bytes(data + b"\x0a" + bytes([len(body)]) + body)
    called = []
    whole = perfetto.PerfettoExporter._read_whole
    monkeypatch.setattr(perfetto.PerfettoExporter, "_read_whole",
                        staticmethod(lambda p: called.append(p) or whole(p)))
    with pytest.raises(ValueError):
        load(path)  # on track 1, a process track: the whole-file reader refuses it
    assert called == [path]
