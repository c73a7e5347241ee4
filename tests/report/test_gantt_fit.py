"""The terminal Gantt fits its width and never labels two lanes alike."""

from __future__ import annotations

import io

import pyarrow as pa
from rich.console import Console

from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.report import gantt
from hotspan.report._gantt import LABEL_WIDTH


def lanes_table(lanes: list[tuple[int, int, int, str]]) -> pa.Table:
    rows = []
    for i, (rank, pid, tid, name) in enumerate(lanes):
        rows.append(
            dict(
                span_id=i + 1,
                parent_id=None,
                name="work",
                category="c",
                start_ns=i * 10,
                end_ns=i * 10 + 100,
                duration_ns=100,
                depth=0,
                thread_id=tid,
                thread_name=name,
                pid=pid,
                rank=rank,
                arg=None,
                error=False,
            )
        )
    columns = {name: [r[name] for r in rows] for name in TRACE_SCHEMA.names}
    arrays = [
        pa.array(columns[f.name], pa.string()).dictionary_encode()
        if pa.types.is_dictionary(f.type)
        else pa.array(columns[f.name], f.type)
        for f in TRACE_SCHEMA
    ]
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


def rendered(table: pa.Table, width: int) -> list[str]:
    console = Console(width=200, file=io.StringIO())
    console.print(gantt(table, width=width))
    return console.file.getvalue().splitlines()


def test_two_pids_with_one_long_thread_name_are_labelled_apart():
    long = "DataLoaderWorkerThreadPool"
    table = lanes_table([(0, 4101, 1, long), (0, 4102, 1, long), (1, 4103, 1, long)])
    labels = [line.split("│")[0].rstrip() for line in rendered(table, 40) if "│" in line]
    assert len(labels) == 3 and len(set(labels)) == 3
    assert all(len(label) <= LABEL_WIDTH for label in labels)
    assert any("4101" in label for label in labels) and any("4102" in label for label in labels)


def test_gantt_fits_80_columns(tmp_path, monkeypatch, capsys):
    from hotspan.cli import main
    from hotspan.formats import export

    table = lanes_table([(0, 1, t, f"t{t}") for t in range(4)])
    export(table, tmp_path / "t.parquet")
    for columns in (80, 120):
        monkeypatch.setenv("COLUMNS", str(columns))
        capsys.readouterr()
        assert main(["gantt", str(tmp_path / "t.parquet")]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert max(len(line) for line in lines) <= columns
        chart = [line for line in lines if line.count("│") == 2]
        # the whole timeline is there: both borders on every lane, as wide as the room left
        assert len(chart) == 4 and all(len(line) == columns for line in chart)
