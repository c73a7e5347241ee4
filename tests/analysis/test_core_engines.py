"""One analysis core (issue 34 item 1): each statistic is computed by the core's kernels
(``statistics``, over Arrow columns), and every engine (the in-memory path, DuckDB streamed
with ``HOTSPAN_STREAM_MIN_BYTES=0``, Spark) sits behind one contract (:class:`Engine`:
``stats(StatsRequest)``, ``phases()``, ``compare(other, CompareOptions)``) and gives the
core's answer on the same inputs: every statistic, every key, filters and windows. Options
travel as one frozen object; no module of ``analysis/`` over 600 lines."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.analysis import _phase_kernel, statistics
from hotspan.analysis._engine import CompareOptions, Engine, StatsRequest, open_spans
from hotspan.analysis.filters import SpanFilter, filter_table
from hotspan.analysis.ranks import RankAnalysis
from hotspan.analysis._rank_source import RankSource
from hotspan.formats.dataset import write_part

pytest.importorskip("duckdb")

ANALYSIS = Path(hotspan.__file__).parent / "analysis"
T0 = 1_700_000_000_000_000_000


def spans(seed: int = 5, steps: int = 150) -> pa.Table:
    """Two ranks, two threads each: steps holding nested compute and a collective (with
    byte counts), a device row under a host span, instants, errors."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    next_id = 1

    def add(**row: object) -> int:
        nonlocal next_id
        row["span_id"] = next_id
        next_id += 1
        rows.append(row)
        return int(row["span_id"])  # type: ignore[call-overload]

    for rank in (0, 1):
        for thread in (1, 2):
            t = T0 + rank * 700
            lane = dict(
                thread_id=thread, thread_name=f"t{thread}", rank=rank, pid=100 + rank, error=False
            )
            for step in range(steps):
                work = int(rng.integers(1_000, 40_000))
                comm = int(rng.integers(500, 9_000 if rank else 3_000))
                total = work + comm + int(rng.integers(50, 900))
                root = add(
                    **lane, parent_id=None, name="step", category="train", start_ns=t,
                    duration_ns=total, depth=0, arg=step if step % 4 == 0 else None,
                )  # fmt: skip
                rows[-1]["error"] = step % 13 == 0
                fwd = add(
                    **lane, parent_id=root, name="forward", category="train/compute",
                    start_ns=t + 10, duration_ns=work, depth=1, arg=None,
                )  # fmt: skip
                add(
                    **lane, parent_id=root, name="allreduce", category="comms",
                    start_ns=t + 20 + work, duration_ns=comm, depth=1, arg=1 << 20,
                )  # fmt: skip
                if step % 10 == 0:
                    add(
                        **{**lane, "thread_id": -1, "thread_name": "cuda:0 stream 7"},
                        parent_id=fwd, name="kernel", category="train/compute",
                        start_ns=t + 30, duration_ns=work // 2, depth=2, arg=None,
                    )  # fmt: skip
                if step % 25 == 0:
                    add(
                        **lane, parent_id=root, name="mark", category="train",
                        start_ns=t + 15, duration_ns=0, depth=1, arg=None,
                    )  # fmt: skip
                t += total + int(rng.integers(10, 2_000))
    for row in rows:
        row["end_ns"] = row["start_ns"] + row["duration_ns"]
    return with_self_ns(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    table = spans()
    directory = tmp_path_factory.mktemp("core") / "run"
    for rank in (0, 1):
        part = table.filter(pc.equal(table.column("rank"), rank))
        write_part(part, directory, rank=rank, pid=100 + rank, seq=0)
    return table, directory


@pytest.fixture
def streamed(monkeypatch):
    """The documented switch: every Parquet input streamed."""
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "0")


def clean(table: pa.Table) -> list[dict]:
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in table.to_pylist()
    ]


KEYS = [
    None,
    ("category", "name"),
    ("name",),
    ("category",),
    ("rank", "name"),
    ("rank", "thread_id", "name"),
    ("thread_name", "category", "name"),
    ("pid",),
    ("depth", "name"),
    ("error", "category"),
    ("device", "name"),
]

FILTERS = [
    None,
    SpanFilter(names=("forward", "allreduce")),
    SpanFilter(categories=("train",)),
    SpanFilter(ranks=(1,)),
    SpanFilter(threads=("t2",)),
    SpanFilter(min_ns=5_000),
    SpanFilter(where=(("name", "~", "^(step|all)"),)),
    SpanFilter(since=0.000_5, until=0.002),  # a window, relative to the run's start
    SpanFilter(since=T0 + 400_000, until=T0 + 3_000_000, overlap=True),  # epoch ns, overlapping
]


def oracle_stats(table: pa.Table, by, span_filter) -> pa.Table:
    """The core itself: the kernels over the filtered table's columns."""
    keys = statistics.default_by(table) if by is None else by
    return statistics.stats(filter_table(table, SpanFilter.of(span_filter)), keys)


@pytest.mark.parametrize("span_filter", FILTERS, ids=lambda f: repr(f) if f else "all")
@pytest.mark.parametrize("by", KEYS, ids=lambda b: ",".join(b) if b else "default")
def test_stats_of_every_engine_equal_the_cores(run, streamed, by, span_filter):
    table, directory = run
    expected = oracle_stats(table, by, span_filter)
    for spans_in, engine in ((table, None), (directory, None), (directory, "memory")):
        got = hotspan.stats(spans_in, by=by, filter=span_filter, engine=engine)
        assert got.schema == expected.schema, (engine, spans_in)
        assert clean(got) == clean(expected), (engine, spans_in)


def oracle_phases(table: pa.Table, span_filter=None) -> pa.Table:
    """The phases kernel itself: the filtered table's spans, their parents found in it, fed to
    ``PhaseSums`` a batch at a time and finished by it."""
    return _phase_kernel.phases_of_table(filter_table(table, SpanFilter.of(span_filter)))


@pytest.mark.parametrize("span_filter", FILTERS, ids=lambda f: repr(f) if f else "all")
def test_phases_of_every_engine_equal_the_cores(run, streamed, span_filter):
    # no filter: the streamed path is the per-process Parquet scan; a filter: DuckDB's join
    table, directory = run
    expected = oracle_phases(table, span_filter)
    assert expected.num_rows > 0
    for spans_in, engine in ((table, None), (directory, None), (directory, "memory")):
        got = hotspan.phases(spans_in, filter=span_filter, engine=engine)
        assert got.schema == expected.schema, (engine, spans_in)
        assert clean(got) == clean(expected), (engine, spans_in)


def waiting(table: pa.Table) -> pa.Table:
    """``table`` with the collectives waiting (as asyncio tasks suspended in them would):
    the phases then count their self time, not their duration."""
    name = table.column("name").to_pylist()
    d = np.asarray(table.column("duration_ns"), np.int64)
    wait = np.where([n == "allreduce" for n in name], d // 3, 0)
    own = np.asarray(table.column("self_ns"), np.int64) - wait
    out = table.set_column(table.schema.get_field_index("wait_ns"), "wait_ns", pa.array(wait))
    return out.set_column(out.schema.get_field_index("self_ns"), "self_ns", pa.array(own))


def rewritten(directory: Path, out: Path, rows_per_group: int, drain_order: bool) -> Path:
    """The parts of ``directory`` again under ``out``, in row groups of ``rows_per_group``,
    their spans in the order they ended (as a recorder drains them: children first) if
    ``drain_order``."""
    import pyarrow.parquet as pq

    out.mkdir()
    for part in sorted(directory.glob("*.parquet")):
        table = pq.read_table(part)
        if drain_order:
            table = table.take(pc.sort_indices(table, [("end_ns", "ascending")]))
        pq.write_table(table, out / part.name, row_group_size=rows_per_group)
    return out


def scan_spy(monkeypatch) -> list:
    """What the per-process Parquet scan answers, each time it is asked (None: it left the
    spans to DuckDB's join)."""
    from hotspan.analysis import _process_phases

    scanned: list = []
    real = _process_phases.phases_of_parts

    def spy(*args, **kwargs):
        scanned.append(result := real(*args, **kwargs))
        return result

    monkeypatch.setattr(_process_phases, "phases_of_parts", spy)
    return scanned


@pytest.mark.parametrize("drain_order", [False, True], ids=["parents-first", "drain-order"])
@pytest.mark.parametrize("rows_per_group", [7, 100_000])
def test_phases_scan_feeds_the_kernel_row_groups_alike(
    run, streamed, tmp_path, monkeypatch, rows_per_group, drain_order
):
    # the Parquet scan's row groups (parents in a later or an earlier one: carried or looked
    # up again) and the in-memory path's batches (of 5 rows here) give the kernel's answer
    table, directory = run
    expected = oracle_phases(table)
    parts = rewritten(directory, tmp_path / "parts", rows_per_group, drain_order)
    scanned = scan_spy(monkeypatch)
    assert clean(hotspan.phases(parts)) == clean(expected)
    assert scanned and scanned[0] is not None  # the scan answered, not DuckDB's join
    monkeypatch.setattr(_phase_kernel, "BATCH_ROWS", 5)
    assert clean(hotspan.phases(table)) == clean(expected)


@pytest.mark.parametrize("span_filter", [None, FILTERS[3], FILTERS[7]], ids=["all", "rank", "win"])
def test_phases_of_spans_that_waited_equal_the_cores(
    run, streamed, tmp_path, monkeypatch, span_filter
):
    # no filter: the Parquet scan sums the self and wait times too; a filter: DuckDB's join
    table, _ = run
    table = waiting(table)
    directory = tmp_path / "run"
    for rank in (0, 1):
        part = table.filter(pc.equal(table.column("rank"), rank))
        write_part(part, directory, rank=rank, pid=100 + rank, seq=0)
    scanned = scan_spy(monkeypatch)
    expected = oracle_phases(table, span_filter)
    # the collectives' time is their self time: less than their spans' durations
    plain = oracle_phases(table.drop_columns(["wait_ns"]), span_filter)
    comms = pc.equal(expected.column("phase"), "comms")
    assert (
        pc.sum(expected.filter(comms).column("time_ns")).as_py()
        < pc.sum(plain.filter(pc.equal(plain.column("phase"), "comms")).column("time_ns")).as_py()
    )
    for spans_in, engine in ((table, None), (directory, None), (directory, "memory")):
        got = hotspan.phases(spans_in, filter=span_filter, engine=engine)
        assert clean(got) == clean(expected), (engine, spans_in)
    assert bool(scanned and scanned[0] is not None) == (span_filter is None)
    small = rewritten(directory, tmp_path / "small", 7, drain_order=True)  # children carried
    assert clean(hotspan.phases(small, filter=span_filter)) == clean(expected)


def shifted(table: pa.Table, factor: float) -> pa.Table:
    """``table`` with the collectives ``factor`` times longer (the rest as it is)."""
    name = table.column("name").to_pylist()
    d = np.asarray(table.column("duration_ns"), np.int64).copy()
    slow = np.array([n == "allreduce" for n in name])
    d[slow] = (d[slow] * factor).astype(np.int64)
    start = np.asarray(table.column("start_ns"), np.int64)
    out = table.set_column(table.schema.get_field_index("duration_ns"), "duration_ns", pa.array(d))
    return out.set_column(out.schema.get_field_index("end_ns"), "end_ns", pa.array(start + d))


@pytest.mark.parametrize("by", [("category", "name"), ("rank", "name"), ("name",)])
@pytest.mark.parametrize("span_filter", [None, SpanFilter(ranks=(0,)), SpanFilter(min_ns=2_000)])
def test_compare_of_every_engine_equals_the_cores(run, streamed, tmp_path, by, span_filter):
    table, directory = run
    new_table = shifted(table, 1.5)
    new_dir = tmp_path / "new"
    for rank in (0, 1):
        part = new_table.filter(pc.equal(new_table.column("rank"), rank))
        write_part(part, new_dir, rank=rank, pid=100 + rank, seq=0)
    options = dict(by=by, resamples=300, seed=3)
    flt = SpanFilter.of(span_filter)
    expected = hotspan.analysis.comparison.compare(
        filter_table(table, flt), filter_table(new_table, flt), **options
    )
    if span_filter is None:
        assert "slower" in expected.column("verdict").to_pylist()
    for base, new in ((table, new_table), (directory, new_dir)):
        got = hotspan.compare(base, new, filter=span_filter, **options)
        assert got.schema == expected.schema
        assert clean(got) == clean(expected)


def test_every_engine_answers_through_one_contract(run, streamed):
    table, directory = run
    request = StatsRequest(by=("rank", "name"))
    answers = []
    ways = ((table, None, "memory"), (directory, None, "duckdb"), (directory, "memory", "memory"))
    for spans_in, engine, kind in ways:
        with open_spans(spans_in, engine=engine) as opened:
            assert opened.kind == kind
            assert isinstance(opened.engine, Engine)
            answers.append(clean(opened.engine.stats(request)))
            assert clean(opened.engine.phases()) == clean(oracle_phases(table))
    assert answers[0] == answers[1] == answers[2] == clean(statistics.stats(table, request.by))


RANK_QUESTIONS = ("collectives", "stragglers", "critical_path", "rank_steps")


def oracle_ranks(table: pa.Table, question: str, span_filter=None) -> pa.Table:
    """The across-ranks kernel itself over the table's batches, the filter applied once."""
    from hotspan.analysis._rank_reasons import critical_path_table, straggler_table

    source = RankSource.in_memory(table, SpanFilter.of(span_filter))
    with RankAnalysis(source) as analysis:
        if question == "collectives":
            return analysis.collectives()
        if question == "stragglers":
            return straggler_table(analysis)
        if question == "critical_path":
            return critical_path_table(analysis)
        return analysis.step_cells()


@pytest.mark.parametrize(
    "span_filter", [None, FILTERS[1], FILTERS[4], FILTERS[5], FILTERS[7]], ids=str
)
@pytest.mark.parametrize("question", RANK_QUESTIONS)
def test_rank_analyses_of_every_engine_equal_the_cores(run, streamed, question, span_filter):
    table, directory = run
    expected = oracle_ranks(table, question, span_filter)
    if question == "collectives" and span_filter is None:
        assert expected.num_rows == 2 * 2 * 150  # both ranks' threads, every step
    ask = getattr(hotspan, question)
    for spans_in, engine in ((table, None), (directory, None), (directory, "memory")):
        got = ask(spans_in, filter=span_filter, engine=engine)
        assert got.schema.remove_metadata() == expected.schema.remove_metadata(), engine
        assert clean(got) == clean(expected), (engine, spans_in)


def test_every_engine_gives_the_ranks_kernel_its_spans(run, streamed):
    table, directory = run
    ways = ((table, None, "memory"), (directory, None, "duckdb"), (directory, "memory", "memory"))
    for spans_in, engine, kind in ways:
        with open_spans(spans_in, engine=engine) as opened:
            assert opened.kind == kind
            source = opened.engine.rank_source()
            assert isinstance(source, RankSource)
            assert (source.table is None) == (kind == "duckdb")  # streamed: parts in batches
            rows = sum(t.num_rows for t in source.batches(("span_id",)))
            assert rows == table.num_rows


def test_options_travel_as_one_frozen_object():
    request = StatsRequest.of("name", {"ranks": (1,)})
    assert request.by == ("name",) and request.filter == SpanFilter(ranks=(1,))
    options = CompareOptions(by="name", threshold=0.1)
    assert options.by == ("name",)
    for frozen in (request, options):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.by = ("category",)  # type: ignore[misc]
    with pytest.raises(ValueError, match="alpha"):
        CompareOptions(alpha=2.0)
    with pytest.raises(ValueError, match="resamples"):
        CompareOptions(resamples=10)


def test_no_analysis_module_is_over_600_lines():
    # timeline.py is being reshaped by issue 33 (p4-timeline) and is measured there
    over = {
        p.name: n
        for p in ANALYSIS.glob("*.py")
        if p.name != "timeline.py" and (n := len(p.read_text().splitlines())) > 600
    }
    assert over == {}


def test_sql_literal_is_written_once():
    defined = [
        p.name
        for p in ANALYSIS.glob("*.py")
        if re.search(r"^def sql_literal\b", p.read_text(), re.MULTILINE)
    ]
    assert defined == ["filters.py"]


@pytest.mark.slow
@pytest.mark.parametrize("by", [None, ("rank", "thread_name", "name"), ("device", "name")])
@pytest.mark.parametrize("span_filter", [None, FILTERS[2], FILTERS[7]], ids=["all", "cat", "win"])
def test_spark_answers_the_cores_stats_and_phases(spark, run, by, span_filter):
    table, directory = run
    got = hotspan.stats(directory, by=by, filter=span_filter, engine=spark)
    expected = oracle_stats(table, by, span_filter)
    assert got.schema == expected.schema
    assert clean(got) == clean(expected)
    if by is None:
        phases = hotspan.phases(directory, filter=span_filter, engine=spark)
        assert clean(phases) == clean(oracle_phases(table, span_filter))


@pytest.mark.slow
@pytest.mark.parametrize("question", RANK_QUESTIONS)
def test_spark_answers_the_cores_rank_analyses(spark, run, question):
    table, directory = run
    got = getattr(hotspan, question)(directory, engine=spark)
    assert clean(got) == clean(oracle_ranks(table, question))


def numpy_stats(table: pa.Table, by: tuple[str, ...]) -> dict:
    """Per key tuple, the statistics numpy gives over the group's rows (an oracle of its own,
    apart from the kernels): count, total, self, min, max, the percentiles, errors."""
    rows: dict[tuple, list[tuple[int, int, bool]]] = {}
    columns = [table.column(k).to_pylist() for k in by]
    for i, (d, s, e) in enumerate(
        zip(*(table.column(c).to_pylist() for c in ("duration_ns", "self_ns", "error")))
    ):
        rows.setdefault(tuple(c[i] for c in columns), []).append((d, s, bool(e)))
    out = {}
    for key, spans_of in rows.items():
        d = np.array([r[0] for r in spans_of], np.int64)
        out[key] = dict(
            count=len(d), total_ns=int(d.sum()), self_ns=sum(r[1] for r in spans_of),
            min_ns=int(d.min()), max_ns=int(d.max()), errors=sum(r[2] for r in spans_of),
            **{f"p{q}_ns": float(np.percentile(d, q)) for q in (50, 90, 99)},
        )  # fmt: skip
    return out


@pytest.mark.parametrize("small_group", [0, 100, 1 << 40], ids=["select", "both", "sort"])
@pytest.mark.parametrize("by", [("category", "name"), ("rank", "thread_id", "name"), ()])
def test_stats_of_a_table_go_through_the_scans_batch_kernels(
    run, streamed, monkeypatch, by, small_group
):
    # The in-memory path and the Parquet scan feed one per-batch kernel (_group_batches:
    # group_sums(ordered=True) a batch, the batches combined and finished alike): a table cut
    # in batches of 37 rows, its groups crossing batch boundaries, gives numpy's answer, that
    # of the table in one batch, and that of the scan of its parts; the order statistics of
    # groups large (select_ranks over their pieces) and small (one sort) alike
    from hotspan.analysis import _group_batches

    monkeypatch.setattr(_group_batches, "SMALL_GROUP", small_group)
    table, directory = run
    calls: list[tuple[int, bool]] = []
    real = _group_batches.group_sums

    def spy(batch, group, groups, duration, *, ordered=False):
        calls.append((batch.num_rows, ordered))
        return real(batch, group, groups, duration, ordered=ordered)

    monkeypatch.setattr(_group_batches, "group_sums", spy)
    whole = clean(hotspan.stats(table, by=by))
    assert calls == [(table.num_rows, True)]
    calls.clear()
    monkeypatch.setattr(_group_batches, "BATCH_ROWS", 37)
    batches = pa.Table.from_batches(table.to_batches(max_chunksize=53))
    assert clean(hotspan.stats(batches, by=by)) == whole
    assert len(calls) == -(-table.num_rows // 37) and all(ordered for _, ordered in calls)
    assert {rows for rows, _ in calls} == {37, table.num_rows % 37}
    calls.clear()
    assert clean(hotspan.stats(directory, by=by)) == whole
    assert calls and all(ordered for _, ordered in calls)  # the scan, not DuckDB's list()
    expected = numpy_stats(table, by)
    assert len(whole) == len(expected)
    for row in whole:
        want = expected[tuple(row[k] for k in by)]
        assert {k: row[k] for k in want} == want
