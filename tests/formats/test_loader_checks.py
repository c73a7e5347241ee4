"""What every loader checks before handing a table over: the schema's own rules (with
``check=False`` for a trusted file), Arrow data fully validated (flipped bytes must not
reach a SIGSEGV later), and a damaged CSV's lost rows said, never silent."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan._schema import META_SKIPPED_ON_LOAD
from hotspan.formats import TraceFileError, export, load
from hotspan.formats._base import (
    MISSING_PARENTS,
    TraceFileWarning,
    check_span_rules,
    missing_parents,
)
from hotspan.formats._csv import INCOMPLETE_LAST_ROW
from hotspan.formats.dataset import write_part

from conftest import assert_same_spans

# The formats that store start, end and duration each: Chrome JSON and Perfetto store a
# start and a length (or two events), and their loaders derive the rest.
COLUMNAR = [".parquet", ".arrow", ".feather", ".csv"]


def hotspan_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def broken(spans: pa.Table, column: str, row: int, value) -> pa.Table:
    values = spans.column(column).to_pylist()
    values[row] = value
    return spans.set_column(
        spans.schema.get_field_index(column),
        spans.schema.field(column),
        pa.array(values, spans.schema.field(column).type),
    )


def written_raw(table: pa.Table, path) -> None:
    """Written past export()'s own checks, as another program (or an older hotspan) might."""
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)


RULES = [
    ("duration_ns", -5, "duration_ns is negative"),
    ("end_ns", None, "end_ns != start_ns + duration_ns"),
    ("depth", -1, "depth is negative"),
    ("span_id", "dup", "span_id"),
]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
@pytest.mark.parametrize("column,value,said", RULES, ids=[r[0] for r in RULES])
def test_a_broken_rule_is_refused_with_its_row_and_check_false_reads_it(
    spans, tmp_path, suffix, column, value, said
):
    row = 1234
    if column == "duration_ns":  # keep end = start + duration: only the sign is wrong
        table = broken(
            broken(spans, "duration_ns", row, value),
            "end_ns",
            row,
            spans.column("start_ns")[row].as_py() + value,
        )
    elif column == "end_ns":
        table = broken(spans, "end_ns", row, spans.column("end_ns")[row].as_py() + 1)
    elif column == "span_id":
        table = broken(spans, "span_id", row, spans.column("span_id")[17].as_py())
    else:
        table = broken(spans, column, row, value)
    path = tmp_path / f"bad{suffix}"
    written_raw(table, path)
    with pytest.raises(TraceFileError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: row {row}: {said}") and "check=False" in message, message
    if column == "span_id":
        assert "already used by row 17" in message
    assert_same_spans(table, load(path, check=False))
    assert hotspan.load(path, check=False).num_rows == spans.num_rows


def test_every_format_and_the_dataset_reader_check(spans, tmp_path):
    table = broken(spans, "end_ns", 99, spans.column("end_ns")[99].as_py() + 1)
    for suffix in COLUMNAR:
        path = tmp_path / f"t{suffix}"
        export(table, path)  # export writes what it is given; the reader is the one that checks
        with pytest.raises(TraceFileError, match="end_ns != start_ns \\+ duration_ns"):
            load(path)
        assert load(path, check=False).num_rows == spans.num_rows
    directory = tmp_path / "dataset"
    write_part(table, directory, rank=0, pid=1, seq=0)
    with pytest.raises(TraceFileError, match=f"^{directory}: row 99: end_ns"):
        load(directory)
    assert load(directory, check=False).num_rows == spans.num_rows


def test_the_rules_pass_on_every_valid_trace(spans):
    check_span_rules(spans, "x")
    check_span_rules(spans.slice(0, 0), "x")


# --------------------------------------------------------------------------- Arrow IPC


@pytest.fixture
def bad_arrow(spans, tmp_path):
    """An Arrow file whose name indices point past the dictionary (what a flipped byte in
    the index buffer gives): the IPC reader takes it, the first to_pylist() would crash."""
    indices = pa.array([0, 1, 1 << 24] + [0] * (spans.num_rows - 3), pa.int32())
    name = pa.DictionaryArray.from_arrays(indices, pa.array(["a", "b"]), safe=False)
    table = spans.set_column(spans.schema.get_field_index("name"), "name", name)
    path = tmp_path / "bad.arrow"
    written_raw(table, path)
    return path


def test_arrow_with_indices_out_of_range_is_refused_not_crashed_on(bad_arrow):
    with pytest.raises(TraceFileError, match="not a valid arrow file: .*out of bounds"):
        load(bad_arrow)


@pytest.mark.slow
def test_cli_on_a_corrupt_arrow_file_says_one_line_and_exits_2(bad_arrow, tmp_path):
    for args in (("stats", bad_arrow), ("export", bad_arrow, tmp_path / "out.parquet")):
        result = hotspan_cli(*args)
        assert result.returncode == 2, (result.returncode, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and str(bad_arrow) in lines[0] and "Traceback" not in result.stderr
        ), result.stderr
    assert not (tmp_path / "out.parquet").exists()


# --------------------------------------------------------------------------- CSV


@pytest.fixture
def one_line_rows(spans):
    """The synthetic spans without the names holding a newline: one CSV line a row."""
    return spans.filter(pc.invert(pc.match_substring(spans.column("name").cast(pa.string()), "\n")))


@pytest.fixture
def csv_bytes(one_line_rows, tmp_path):
    path = tmp_path / "whole.csv"
    export(one_line_rows, path)
    return path.read_bytes()


def test_truncated_csv_loads_the_whole_rows_and_says_what_it_left_out(
    one_line_rows, csv_bytes, tmp_path
):
    rows = 5000
    export(one_line_rows.slice(0, rows), tmp_path / "first.csv")  # the whole file's first rows
    cut = len((tmp_path / "first.csv").read_bytes()) + 7  # and 7 bytes of the next
    path = tmp_path / "cut.csv"
    path.write_bytes(csv_bytes[:cut])
    with pytest.warns(
        TraceFileWarning, match=r"cut.csv: [\d,]+ row\(s\) left out: 1 incomplete last row"
    ):
        table = load(path)
    # Also said: the spans the rows kept name as parent that are not in the file (cut away
    # with the rest, or left out of these synthetic rows).
    reasons = json.loads(table.schema.metadata[META_SKIPPED_ON_LOAD])["reasons"]
    assert reasons.pop(INCOMPLETE_LAST_ROW) == 1
    assert (
        list(reasons) == [MISSING_PARENTS]
        and reasons[MISSING_PARENTS] == missing_parents(table) - 1
    )
    assert_same_spans(one_line_rows.slice(0, rows), table)


def test_csv_rows_with_missing_fields_are_counted(one_line_rows, csv_bytes, tmp_path):
    lines = csv_bytes.split(b"\n")
    lines[5] = lines[5].rsplit(b",", 3)[0]  # three fields short
    lines[9] = lines[9] + b",1"  # one too many
    path = tmp_path / "holes.csv"
    path.write_bytes(b"\n".join(lines))
    with pytest.warns(TraceFileWarning, match="2 row.s. with the wrong number of fields"):
        table = load(path)
    kept = [
        i for i in range(one_line_rows.num_rows) if i not in (4, 8)
    ]  # lines 5 and 9, past the header
    assert_same_spans(one_line_rows.take(kept), table)
    reasons = json.loads(table.schema.metadata[META_SKIPPED_ON_LOAD])["reasons"]
    assert reasons["row(s) with the wrong number of fields"] == 2
    assert reasons.get(MISSING_PARENTS, 0) == max(
        0, missing_parents(table) - 2
    )  # each left-out row said once


def test_csv_with_nothing_valid_left_is_refused(csv_bytes, tmp_path):
    path = tmp_path / "header.csv"
    path.write_bytes(csv_bytes[: csv_bytes.index(b"\n") + 30])  # the header and part of a row
    with pytest.raises(TraceFileError, match="no valid span left: 1 incomplete last row"):
        load(path)


def test_a_csv_that_is_not_hotspans_says_so_in_one_line(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(
        TraceFileError,
        match="^"
        + str(path)
        + ": not a hotspan CSV: its first line is not the span table's header",
    ):
        load(path)
    path.write_text(
        "span_id,parent_id,name,category,start_ns,end_ns,duration_ns,depth,thread_id,thread_name,pid,rank\n"
    )
    with pytest.raises(TraceFileError, match="its header has no arg, error column"):
        load(path)


@pytest.mark.slow
def test_cli_says_the_csv_warning_in_one_line(one_line_rows, csv_bytes, tmp_path):
    path = tmp_path / "cut.csv"
    path.write_bytes(csv_bytes[:-3])
    result = hotspan_cli("stats", path, "--json")
    assert result.returncode == 0, result.stderr
    loaded = one_line_rows.num_rows - 1
    said = result.stderr.strip()
    assert "\n" not in said and said.startswith(f"hotspan: warning: {path}: ")
    assert f"1 {INCOMPLETE_LAST_ROW}" in said
    assert said.endswith(f"; {loaded:,} loaded")


def test_a_depth_that_is_not_its_parents_plus_one_is_refused(spans, tmp_path):
    import numpy as np

    ids = spans.column("span_id").to_numpy()
    parents = spans.column("parent_id").to_pylist()
    child = next(i for i, p in enumerate(parents) if p is not None)
    parent_row = int(np.flatnonzero(ids == parents[child])[0])
    depth = spans.column("depth").to_pylist()
    depth[child] += 1  # two levels under its parent
    index = spans.schema.get_field_index("depth")
    bad = spans.set_column(index, spans.schema.field(index), pa.array(depth, pa.int32()))
    export(bad, tmp_path / "deep.parquet")
    with pytest.raises(
        TraceFileError,
        match=rf"row {child}: depth {depth[child]} under a parent at depth "
        rf"{depth[parent_row]} \(row {parent_row}\), not one level up",
    ):
        load(tmp_path / "deep.parquet")
    assert load(tmp_path / "deep.parquet", check=False).num_rows == spans.num_rows
    check_span_rules(spans, "fine")  # the unchanged table keeps the rule


@pytest.mark.parametrize(
    "ph, words",
    [
        (7, "1 event(s) whose 'ph' is not a string"),
        ({"x": 1}, "1 event(s) whose 'ph' is not a string"),
        ("Z", "1 event(s) with a 'ph' the format does not have"),
        ("XX", "1 event(s) with a 'ph' the format does not have"),
        (None, "1 event(s) with no 'ph'"),
    ],
)
def test_a_chrome_event_with_an_unknown_or_non_string_ph_is_counted(ph, words, tmp_path):
    # An event hotspan cannot read is said in the load's warning and counted in the
    # metadata, as a 'B' never closed is; a known phase that is no span (a counter) is not.
    events = [
        {"ph": "X", "name": "kept", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "C", "name": "counter", "ts": 1, "pid": 1, "tid": 1, "args": {"v": 1}},
        {"ph": ph, "name": "odd", "ts": 2, "dur": 1, "pid": 1, "tid": 1},
    ]
    if ph is None:
        del events[2]["ph"]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.warns(TraceFileWarning) as caught:
        table = load(path)
    assert table.column("name").to_pylist() == ["kept"]
    said = [str(w.message) for w in caught if issubclass(w.category, TraceFileWarning)]
    assert len(said) == 1 and f"1 row(s) left out: {words}; 1 loaded" in said[0], said
    skipped = json.loads(table.schema.metadata[META_SKIPPED_ON_LOAD])
    assert skipped["total"] == 1


def test_a_chrome_file_of_only_unreadable_events_is_refused(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps([{"ph": 88, "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]))
    with pytest.raises(TraceFileError, match="'ph' is not a string"):
        load(path)


def test_the_rules_hold_for_ids_spread_over_ranks(spans):
    # Ids of several ranks merged spread far wider than their number: looked up through a
    # hash table rather than an array over their range; the same rows are named.
    import numpy as np

    def spread(values):
        return values * np.uint64(1 << 40) + np.uint64(5)

    ids = spread(spans.column("span_id").to_numpy())
    parents = spans.column("parent_id")
    spread_parents = pa.array(
        spread(parents.fill_null(0).to_numpy()), pa.uint64(), mask=parents.is_null().to_numpy()
    )
    table = spans.set_column(0, spans.schema.field(0), pa.array(ids, pa.uint64()))
    table = table.set_column(1, spans.schema.field(1), spread_parents)
    check_span_rules(table, "x")
    twice = ids.copy()
    twice[30] = twice[12]
    with pytest.raises(TraceFileError, match=r"^x: row 30: span_id \d+ already used by row 12;"):
        check_span_rules(table.set_column(0, spans.schema.field(0), pa.array(twice)), "x")
    child = next(i for i, p in enumerate(parents.to_pylist()) if p is not None)
    parent_row = int(np.flatnonzero(ids == spread_parents[child].as_py())[0])
    depth = spans.column("depth").to_numpy().copy()
    depth[child] += 1
    index = spans.schema.get_field_index("depth")
    with pytest.raises(
        TraceFileError, match=rf"^x: row {child}: depth .* \(row {parent_row}\), not one level up"
    ):
        check_span_rules(
            table.set_column(index, spans.schema.field(index), pa.array(depth, pa.int32())), "x"
        )
