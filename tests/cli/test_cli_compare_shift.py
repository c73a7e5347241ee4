"""`hotspan compare` tells a busy machine from a regression (issue 25 item 5), and the time
window works on every command that reads spans."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.formats import export, load


def run_of(scale: dict[str, float], seed: int) -> pa.Table:
    """Eight span names, each name's durations scaled by its factor (default 1)."""
    rng = np.random.default_rng(seed)
    rows, t = [], 1_700_000_000_000_000_000
    for i in range(1600):
        name = f"op{i % 8}"
        d = int(rng.normal(100_000, 2_000) * scale.get(name, 1.0))
        rows.append({"span_id": i + 1, "parent_id": None, "name": name, "category": "work", "start_ns": t,
                     "end_ns": t + d, "duration_ns": d, "depth": 0, "thread_id": 1, "thread_name": "main", "pid": 1,
                     "rank": 0, "arg": None, "error": False})
        t += d + 1_000_000  # 1.1 ms a span: 1.76 s in all
    return with_self_ns(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA))


@pytest.fixture
def cli(capsys):
    from hotspan.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_every_group_slower_is_the_machine_and_one_group_more_is_the_code(cli, tmp_path):
    export(run_of({}, 1), tmp_path / "base.parquet")
    machine = {f"op{i}": 1.15 for i in range(8)}
    export(run_of(machine, 2), tmp_path / "busy.parquet")
    export(run_of({**machine, "op7": 1.6}, 3), tmp_path / "regressed.parquet")

    code, out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "busy.parquet", "--by", "name")
    assert code == 0, out + err  # unchanged code on a busier machine: nothing judged slower
    assert "the machine, not the code" in out and "+15" in out
    code, out, _ = cli("compare", tmp_path / "base.parquet", tmp_path / "busy.parquet", "--by", "name", "--absolute")
    assert code == 1  # raw times: every group slower

    code, out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "regressed.parquet", "--by", "name",
                         "--json")
    assert code == 1, out + err  # op7 moved past the machine's shift
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["op7"]["verdict"] == "slower" and rows["op0"]["verdict"] == "same"
    assert rows["op7"]["judged_change"] == pytest.approx(1.6 / 1.15 - 1, abs=0.03)

    code, out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "regressed.parquet", "--by", "name",
                         "--normalize", "op0", "--json")
    assert code == 1, out + err
    assert {r["name"]: r["verdict"] for r in json.loads(out)}["op7"] == "slower"
    code, _out, err = cli("compare", tmp_path / "base.parquet", tmp_path / "regressed.parquet", "--normalize", "nope")
    assert code == 2 and "no span named 'nope'" in err


def test_since_and_until_on_the_commands_that_read_spans(cli, tmp_path):
    table = run_of({}, 4)
    export(table, tmp_path / "run.parquet")
    first = table.column("start_ns").to_numpy().min()
    code, out, err = cli("export", tmp_path / "run.parquet", tmp_path / "window.parquet", "--since", "0.5",
                         "--until", "1")
    assert code == 0, err
    starts = load(tmp_path / "window.parquet").column("start_ns").to_numpy()
    assert len(starts) and starts.min() >= first + 500_000_000 and starts.max() < first + 1_000_000_000
    expected = int(((table.column("start_ns").to_numpy() >= first + 500_000_000)
                    & (table.column("start_ns").to_numpy() < first + 1_000_000_000)).sum())
    assert len(starts) == expected
    code, out, err = cli("stats", tmp_path / "run.parquet", "--since", str(first + 500_000_000), "--json")
    assert code == 0 and sum(r["count"] for r in json.loads(out)) == int((table.column("start_ns").to_numpy()
                                                                           >= first + 500_000_000).sum())
    code, _out, err = cli("report", tmp_path / "run.parquet", "--until", "0.2", "-o", tmp_path / "r.html")
    assert code == 0, err
    code, _out, err = cli("gantt", tmp_path / "run.parquet", "--since", "1.5", "--width", "40")
    assert code == 0, err
    code, _out, err = cli("stats", tmp_path / "run.parquet", "--since", "soon")
    assert code == 2 and "--since" in err
