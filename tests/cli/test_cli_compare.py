"""`hotspan compare` on real recordings: noise is not a regression, a real slowdown is."""

from __future__ import annotations

import time

import pytest

import hotspan
from hotspan.formats import export


@pytest.fixture
def cli(capsys):
    from hotspan.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def workload(sleep_s: float = 0.001, reps: int = 30, stall_at: int | None = None):
    """Steps that sleep (timer-bound, so stable on a loaded machine); one step may stall."""
    hotspan.enable()
    hotspan.drain()
    for i in range(reps):
        with hotspan.span("step", "loop"):
            with hotspan.span("wait", "io"):
                time.sleep(0.02 if i == stall_at else sleep_s)
            with hotspan.span("poll", "io"):
                time.sleep(0.0002)
    return hotspan.drain()


def interleaved_runs(
    reps: int = 30, stall_at: int | None = None, wait_s: tuple[float, float] = (0.001, 0.001)
):
    """The same workload recorded as two runs whose steps alternate in time: on a shared
    machine whose load drifts within seconds, two runs recorded one after the other differ
    by the drift (a real, but environmental, shift); alternating them leaves the noise and
    the outliers, which is what compare must not call a regression."""
    import pyarrow as pa

    runs: tuple[list, list] = ([], [])
    hotspan.enable()
    hotspan.drain()
    for i in range(reps):
        for side in (0, 1):
            with hotspan.span("step", "loop"):
                with hotspan.span("wait", "io"):
                    time.sleep(0.02 if side == 1 and i == stall_at else wait_s[side])
                with hotspan.span("poll", "io"):
                    time.sleep(0.0002)
            runs[side].append(hotspan.drain())
    return tuple(pa.concat_tables(tables) for tables in runs)


@pytest.mark.slow
def test_the_same_workload_twice_is_not_slower_in_20_of_20_pairs(cli, tmp_path):
    codes = []
    for pair in range(20):
        base, new = tmp_path / f"base{pair}.parquet", tmp_path / f"new{pair}.parquet"
        # One stall in the new run: it moves the mean of `wait` by ~60%, the median not at all.
        base_table, new_table = interleaved_runs(stall_at=pair % 30)
        export(base_table, base)
        export(new_table, new)
        code, out, err = cli("compare", base, new)
        codes.append(code)
        assert code == 0, out + err
    assert codes == [0] * 20


def test_a_ten_percent_slower_span_is_slower(cli, tmp_path):
    # interleaved, so that the machine's load drifting between two runs is not the change seen
    base_table, new_table = interleaved_runs(reps=40, wait_s=(0.001, 0.0011))
    export(base_table, tmp_path / "base.parquet")
    export(new_table, tmp_path / "new.parquet")
    code, out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "new.parquet", "--json")
    assert code == 1, out + err
    import json

    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["wait"]["verdict"] == "slower"
    assert 0.05 < rows["wait"]["p50_ns_change"] < 0.15 and rows["wait"]["change_low"] > 0.05
    assert rows["poll"]["verdict"] == "same"
    code, out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "new.parquet")
    assert code == 1
    line = next(text for text in out.splitlines() if "wait" in text)
    assert "slower" in line and "[+" in line  # the interval, wholly above the threshold


def test_no_span_in_common_is_nothing_to_compare(cli, tmp_path):
    hotspan.drain()
    with hotspan.span("a"):
        pass
    export(hotspan.drain(), tmp_path / "a.parquet")
    with hotspan.span("b"):
        pass
    export(hotspan.drain(), tmp_path / "b.parquet")
    code, out, err = cli("compare", tmp_path / "a.parquet", tmp_path / "b.parquet")
    assert code == 2 and "nothing to compare" in err


def test_appeared_and_disappeared_spans_are_listed_and_can_fail(cli, tmp_path):
    hotspan.drain()
    for name in ("kept", "kept", "went"):
        with hotspan.span(name):
            pass
    export(hotspan.drain(), tmp_path / "base.parquet")
    for name in ("kept", "kept", "came"):
        with hotspan.span(name):
            pass
    export(hotspan.drain(), tmp_path / "new.parquet")
    code, out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "new.parquet")
    assert code == 0, err
    lines = out.splitlines()
    assert any("went" in t and "gone" in t for t in lines) and any(
        "came" in t and "new" in t for t in lines
    )
    assert "1 gone, 1 new" in out
    code, out, err = cli(
        "compare", tmp_path / "base.parquet", tmp_path / "new.parquet", "--fail-on-missing"
    )
    assert code == 1
