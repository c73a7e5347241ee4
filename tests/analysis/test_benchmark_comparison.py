"""Comparing pytest-benchmark JSON files (analysis/benchmark_comparison.py) and its CLI:
the verdict rules, the detection by content, bad files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hotspan.analysis.benchmark_comparison import (BenchmarkFileError, compare_benchmarks, is_benchmark_json,
                                                   load_benchmark_json)


def bench(name: str, rounds_s, *, data: bool = True, spans=None) -> dict:
    """One benchmark entry as pytest-benchmark writes it, from the time of each round."""
    values = np.asarray(rounds_s, np.float64)
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    stats = {"min": values.min(), "max": values.max(), "mean": values.mean(), "median": median, "q1": q1, "q3": q3,
             "iqr": q3 - q1, "rounds": len(values), "iterations": 1}
    stats = {k: (int(v) if k in ("rounds", "iterations") else float(v)) for k, v in stats.items()}
    if data:
        stats["data"] = values.tolist()
    extra = {} if spans is None else {"hotspan": {"spans": spans, "dropped": 0}}
    return {"group": None, "name": name.split("::")[-1], "fullname": name, "params": None, "param": None,
            "extra_info": extra, "options": {}, "stats": stats}


def doc(*benches) -> dict:
    return {"machine_info": {"node": "test"}, "commit_info": {}, "benchmarks": list(benches),
            "datetime": "2026-11-30T00:00:00", "version": "5.3.1"}


def span(name: str, p50: float, count: int = 1000, category: str = "c") -> dict:
    return {"category": category, "name": name, "count": count, "p50_ns": p50, "p99_ns": p50 * 2,
            "total_ns": int(p50 * count)}


def noisy(median: float, n: int = 200, seed: int = 0) -> np.ndarray:
    return median * (1 + np.random.default_rng(seed).normal(0, 0.02, n))


def verdicts(rows):
    return {(r["benchmark"], r.get("name")): r["verdict"] for r in rows}


def test_rounds_rule_slower_only_beyond_the_threshold():
    base = doc(bench("t::a", noisy(1e-3)), bench("t::b", noisy(1e-3, seed=1)))
    new = doc(bench("t::a", noisy(1.3e-3, seed=2)), bench("t::b", noisy(1.0e-3, seed=3)))
    rows = compare_benchmarks(base, new)["benchmarks"]
    assert [r["rule"] for r in rows] == ["rounds", "rounds"]
    assert verdicts(rows) == {("t::a", None): "slower", ("t::b", None): "same"}
    a = rows[0]
    assert a["p_value"] < 0.05 and 0.25 < a["change_low"] <= a["median_s_change"] <= a["change_high"] < 0.35
    # The other way round: faster.
    assert compare_benchmarks(new, base)["benchmarks"][0]["verdict"] == "faster"


def test_quartile_rule_without_rounds():
    base = doc(bench("t::apart", noisy(1e-3), data=False), bench("t::overlap", [1e-3, 1.1e-3, 3e-3, 4e-3], data=False))
    new = doc(bench("t::apart", noisy(1.2e-3, seed=1), data=False),
              bench("t::overlap", [1.1e-3, 1.5e-3, 3.1e-3, 4e-3], data=False))
    rows = compare_benchmarks(base, new)["benchmarks"]
    assert [r["rule"] for r in rows] == ["quartiles", "quartiles"]
    # The median of "overlap" rose by far more than 5%, but its quartiles overlap: not judged slower.
    assert rows[1]["median_s_change"] > 0.05
    assert verdicts(rows) == {("t::apart", None): "slower", ("t::overlap", None): "same"}


def test_span_rows_new_gone_and_few():
    base = doc(bench("t::a", noisy(1e-3), spans=[span("hot", 100.0), span("steady", 50.0), span("old", 10.0),
                                                 span("rare", 10.0, count=3)]),
               bench("t::gone", noisy(1e-3)))
    new = doc(bench("t::a", noisy(1e-3, seed=1), spans=[span("hot", 120.0), span("steady", 51.0),
                                                        span("fresh", 5.0), span("rare", 99.0, count=3)]),
              bench("t::new", noisy(1e-3)))
    result = compare_benchmarks(base, new, min_count=10)
    assert verdicts(result["benchmarks"]) == {("t::a", None): "same", ("t::gone", None): "gone",
                                              ("t::new", None): "new"}
    assert verdicts(result["spans"]) == {("t::a", "hot"): "slower", ("t::a", "steady"): "same",
                                         ("t::a", "old"): "gone", ("t::a", "rare"): "few", ("t::a", "fresh"): "new"}
    hot = next(r for r in result["spans"] if r["name"] == "hot")
    assert hot["p50_ns_change"] == pytest.approx(0.2) and hot["count_base"] == 1000


def test_detection_by_content(tmp_path):
    path = tmp_path / "anything.txt"
    path.write_text(json.dumps(doc(bench("t::a", [1e-3, 2e-3])), indent=4))
    assert is_benchmark_json(path)
    sorted_keys = tmp_path / "sorted.json"
    sorted_keys.write_text(json.dumps(doc(bench("t::a", [1e-3])), sort_keys=True))
    assert is_benchmark_json(sorted_keys)
    chrome = tmp_path / "trace.json"
    chrome.write_text(json.dumps({"traceEvents": [], "machine_info": {}}))
    assert not is_benchmark_json(chrome)
    assert not is_benchmark_json(tmp_path / "missing.json")


@pytest.mark.parametrize("text, problem", [
    ('{"machine_info": {"node": "x"}, "benchmarks": [', "not valid JSON"),
    ('{"machine_info": {}, "benchmarks": {}}', "no list of benchmarks"),
    ('{"machine_info": {}, "benchmarks": [{"fullname": "t::a", "stats": {"median": "fast"}}]}',
     "benchmark 't::a': no stats with a median and a mean"),
    ('{"machine_info": {}, "benchmarks": [{"fullname": "t::a", "stats": {"median": 1, "mean": 1}, '
     '"extra_info": {"hotspan": {"spans": 3}}}]}', "extra_info.hotspan.spans is not a list"),
])
def test_bad_files_name_the_file_and_the_problem(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(BenchmarkFileError, match=problem) as caught:
        load_benchmark_json(path)
    assert str(caught.value).startswith(str(path))


def test_cli_bad_file_is_one_line_and_exit_2(tmp_path, capsys):
    from hotspan.cli import main

    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc(bench("t::a", [1e-3, 2e-3]))))
    bad = tmp_path / "bad.json"
    bad.write_text('{"machine_info": {"node": "x"}, "benchm')
    assert main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "not valid JSON" in err
    trace = tmp_path / "t.parquet"
    assert main(["compare", str(good), str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a pytest-benchmark file and" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc(bench("t::b", [1e-3, 2e-3]))))
    assert main(["compare", str(good), str(other)]) == 2
    assert "no benchmark in common" in capsys.readouterr().err
    assert main(["compare", str(good), str(good), "--by", "name"]) == 2
    assert "--by applies to traces" in capsys.readouterr().err


def test_a_benchmark_and_its_only_span_get_one_verdict():
    """Issue 20: +7.2% `same` for the benchmark and +7.3% `slower` for its only span were two
    rules; now the span's change is judged with its benchmark's noise, by compare's rule."""
    seen = set()
    for seed, true_change, noise in ((11, 0.072, 0.25), (12, 0.3, 0.01), (13, 0.0, 0.02), (14, 0.072, 0.2)):
        rng = np.random.default_rng(seed)
        base_rounds = 1e-3 * (1 + rng.normal(0, noise, 40))
        new_rounds = 1e-3 * (1 + true_change) * (1 + rng.normal(0, noise, 40))
        change = np.median(new_rounds) / np.median(base_rounds) - 1
        base = doc(bench("t::only", base_rounds, spans=[span("work", 1_000_000.0)]))
        new = doc(bench("t::only", new_rounds, spans=[span("work", 1_000_000.0 * (1 + change + 0.001))]))
        result = compare_benchmarks(base, new)
        (b,), (s,) = result["benchmarks"], result["spans"]
        assert b["verdict"] == s["verdict"], (seed, b, s)
        seen.add(b["verdict"])
    assert {"same", "slower"} <= seen  # both kinds of verdict were exercised
