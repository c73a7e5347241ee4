"""JSON Lines: one span a line with the schema's columns, lossless both ways."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.json as pajson
import pytest

import hotspan
from hotspan._schema import SPAN_SCHEMA
from hotspan.formats import TraceFileError, export, load


def awkward_spans() -> pa.Table:
    """Ids past 2**53 (exact only as integers), a null and an empty category, unicode, an arg of 0."""
    rows = [
        dict(
            span_id=(1 << 63) + 12345,
            parent_id=None,
            name="step ✓",
            category=None,
            start_ns=1_700_000_000_000_000_001,
            end_ns=1_700_000_000_000_000_901,
            duration_ns=900,
            depth=0,
            thread_id=2**40 + 3,
            thread_name="main",
            pid=4242,
            rank=40,
            arg=0,
            error=False,
            self_ns=900,
            wait_ns=0,
        ),
        dict(
            span_id=(1 << 63) + 12346,
            parent_id=(1 << 63) + 12345,
            name='quote " and \\',
            category="",
            start_ns=1_700_000_000_000_000_002,
            end_ns=1_700_000_000_000_000_002,
            duration_ns=0,
            depth=1,
            thread_id=2**40 + 3,
            thread_name="main",
            pid=4242,
            rank=40,
            arg=None,
            error=True,
            self_ns=0,
            wait_ns=0,
        ),
    ]
    arrays = []
    for field in SPAN_SCHEMA:
        values = [r[field.name] for r in rows]
        arrays.append(
            pa.array(values, pa.string()).dictionary_encode()
            if pa.types.is_dictionary(field.type)
            else pa.array(values, field.type)
        )
    return pa.Table.from_arrays(arrays, schema=SPAN_SCHEMA)


def test_one_span_a_line_with_the_schema_columns(tmp_path):
    table = awkward_spans()
    path = tmp_path / "t.jsonl"
    export(table, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    # The first line also says how many spans the file holds (a load of a file with lines
    # cut out says how many): the schema's columns, then that count.
    assert list(first) == [*SPAN_SCHEMA.names, "hotspan.spans"] and first["hotspan.spans"] == 2
    assert list(json.loads(lines[1])) == SPAN_SCHEMA.names
    assert (
        first["span_id"] == (1 << 63) + 12345
        and first["category"] is None
        and first["name"] == "step ✓"
    )
    assert json.loads(lines[1])["category"] == "" and json.loads(lines[1])["arg"] is None


def test_lossless_round_trip_and_pyarrow_json_reads_it(tmp_path):
    table = awkward_spans()
    path = tmp_path / "t.jsonl"
    export(table, path)
    back = load(path)
    assert back.schema.remove_metadata() == SPAN_SCHEMA
    assert back.to_pylist() == table.to_pylist()
    plain = pajson.read_json(path)  # no schema given: pyarrow infers one, every column there
    assert plain.column_names == [*SPAN_SCHEMA.names, "hotspan.spans"] and plain.num_rows == 2
    assert plain.column("hotspan.spans").to_pylist() == [2, None]


def test_recorded_trace_round_trip_and_cli_export(tmp_path, capsys):
    from hotspan.cli import main

    hotspan.drain()
    with hotspan.span("outer", "io", arg=1 << 20):
        with hotspan.span("inner"):
            pass
    table = hotspan.drain()
    export(table, tmp_path / "t.parquet")
    assert main(["export", str(tmp_path / "t.parquet"), str(tmp_path / "t.jsonl")]) == 0
    assert load(tmp_path / "t.jsonl").to_pylist() == table.to_pylist()
    assert main(["stats", str(tmp_path / "t.jsonl"), "--json"]) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out.split("\n", 1)[1])} == {
        "outer",
        "inner",
    }


def test_lines_that_are_not_spans_name_the_file(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"msg": "hello"}\n')
    with pytest.raises(TraceFileError, match="log.jsonl"):
        load(path)
