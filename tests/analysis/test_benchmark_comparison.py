"""Comparing pytest-benchmark JSON files (analysis/_benchmark_comparison.py) and its CLI:
the verdict rules, the detection by content, bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hotspan.analysis._benchmark_comparison import (
    BenchmarkFileError,
    compare_benchmarks,
    is_benchmark_json,
    load_benchmark_json,
)


def bench(name: str, rounds_s, *, data: bool = True, spans=None) -> dict:
    """One benchmark entry as pytest-benchmark writes it, from the time of each round."""
    values = np.asarray(rounds_s, np.float64)
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    stats = {
        "min": values.min(),
        "max": values.max(),
        "mean": values.mean(),
        "stddev": values.std(ddof=1) if len(values) > 1 else 0.0,
        "median": median,
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "rounds": len(values),
        "iterations": 1,
    }
    stats = {k: (int(v) if k in ("rounds", "iterations") else float(v)) for k, v in stats.items()}
    if data:
        stats["data"] = values.tolist()
    extra = {} if spans is None else {"hotspan": {"spans": spans, "dropped": 0}}
    return {
        "group": None,
        "name": name.split("::")[-1],
        "fullname": name,
        "params": None,
        "param": None,
        "extra_info": extra,
        "options": {},
        "stats": stats,
    }


def doc(*benches) -> dict:
    return {
        "machine_info": {"node": "test"},
        "commit_info": {},
        "benchmarks": list(benches),
        "datetime": "2026-11-30T00:00:00",
        "version": "5.3.1",
    }


def span(
    name: str, p50: float, count: int = 1000, category: str = "c", noise: float = 0.02, seed=0
) -> dict:
    """A span summary as ``pytest --hotspan`` writes it: ``count`` durations about ``p50``."""
    values = p50 * (1 + np.random.default_rng(seed).normal(0, noise, count))
    return {
        "category": category,
        "name": name,
        "count": count,
        "p50_ns": float(np.median(values)),
        "p99_ns": float(np.percentile(values, 99)),
        "total_ns": int(values.sum()),
        "mean_ns": float(values.mean()),
        "stddev_ns": float(values.std(ddof=1)) if count > 1 else 0.0,
        "data_ns": [int(v) for v in np.sort(values)[:: max(1, count // 200)]],
    }


def noisy(median: float, n: int = 200, seed: int = 0) -> np.ndarray:
    return median * (1 + np.random.default_rng(seed).normal(0, 0.02, n))


def verdicts(rows):
    return {(r["benchmark"], r.get("name")): r["verdict"] for r in rows}


def test_rounds_rule_slower_only_beyond_the_threshold():
    base = doc(bench("t::a", noisy(1e-3)), bench("t::b", noisy(1e-3, seed=1)))
    new = doc(bench("t::a", noisy(1.3e-3, seed=2)), bench("t::b", noisy(1.0e-3, seed=3)))
    rows = compare_benchmarks(base, new)["benchmarks"]
    assert [r["rule"] for r in rows] == ["samples", "samples"]
    assert verdicts(rows) == {("t::a", None): "slower", ("t::b", None): "same"}
    a = rows[0]
    assert (
        a["p_value"] < 0.05
        and 0.25 < a["change_low"] <= a["median_s_change"] <= a["change_high"] < 0.35
    )
    # The other way round: faster.
    assert compare_benchmarks(new, base)["benchmarks"][0]["verdict"] == "faster"


def test_welch_rule_without_rounds():
    """Without the rounds, Welch's t-test on the summary (mean, stddev, rounds), by the same
    threshold: not "interquartile ranges apart" any more."""
    base = doc(
        bench("t::apart", noisy(1e-3), data=False),
        bench("t::overlap", [1e-3, 1.1e-3, 3e-3, 4e-3], data=False),
    )
    new = doc(
        bench("t::apart", noisy(1.2e-3, seed=1), data=False),
        bench("t::overlap", [1.1e-3, 1.5e-3, 3.1e-3, 4e-3], data=False),
    )
    rows = compare_benchmarks(base, new)["benchmarks"]
    assert [r["rule"] for r in rows] == ["welch", "welch"]
    # The median of "overlap" rose by far more than 5%, but 4 rounds that spread say nothing.
    assert rows[1]["median_s_change"] > 0.05 and rows[1]["p_value"] > 0.5
    assert 0.15 < rows[0]["change_low"] < 0.2 < rows[0]["change_high"] < 0.25
    assert verdicts(rows) == {("t::apart", None): "slower", ("t::overlap", None): "same"}


def test_span_rows_new_gone_and_few():
    base = doc(
        bench(
            "t::a",
            noisy(1e-3),
            spans=[
                span("hot", 100.0),
                span("steady", 50.0),
                span("old", 10.0),
                span("rare", 10.0, count=3),
            ],
        ),
        bench("t::gone", noisy(1e-3)),
    )
    new = doc(
        bench(
            "t::a",
            noisy(1e-3, seed=1),
            spans=[
                span("hot", 120.0, seed=1),
                span("steady", 50.0, seed=2),
                span("fresh", 5.0),
                span("rare", 99.0, count=3),
            ],
        ),
        bench("t::new", noisy(1e-3)),
    )
    result = compare_benchmarks(base, new, min_count=10)
    assert verdicts(result["benchmarks"]) == {
        ("t::a", None): "same",
        ("t::gone", None): "gone",
        ("t::new", None): "new",
    }
    assert verdicts(result["spans"]) == {
        ("t::a", "hot"): "slower",
        ("t::a", "steady"): "same",
        ("t::a", "old"): "gone",
        ("t::a", "rare"): "few",
        ("t::a", "fresh"): "new",
    }
    hot = next(r for r in result["spans"] if r["name"] == "hot")
    assert hot["p50_ns_change"] == pytest.approx(0.2, abs=0.01) and hot["count_base"] == 1000
    assert hot["rule"] == "samples" and hot["change_low"] > 0.1


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


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"machine_info": {"node": "x"}, "benchmarks": [', "not valid JSON"),
        ('{"machine_info": {}, "benchmarks": {}}', "no list of benchmarks"),
        (
            '{"machine_info": {}, "benchmarks": [{"fullname": "t::a", "stats": {"median": "fast"}}]}',
            "benchmark 't::a': no stats with a median and a mean",
        ),
        (
            '{"machine_info": {}, "benchmarks": [{"fullname": "t::a", "stats": {"median": 1, "mean": 1}, '
            '"extra_info": {"hotspan": {"spans": 3}}}]}',
            "extra_info.hotspan.spans is not a list",
        ),
    ],
)
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


def span_of(rounds_s, *, data: bool = True, extra: int = 5) -> dict:
    """The summary of a span around the benchmarked function: one occurrence a round (in ns,
    less 1 us of the benchmark's own overhead) and ``extra`` more of its calibration."""
    values = np.concatenate([np.asarray(rounds_s) * 1e9 - 1000, np.asarray(rounds_s[:extra]) * 1e9])
    summary = {
        "category": "c",
        "name": "work",
        "count": len(values),
        "p50_ns": float(np.median(values)),
        "p99_ns": float(np.percentile(values, 99)),
        "total_ns": int(values.sum()),
        "mean_ns": float(values.mean()),
        "stddev_ns": float(values.std(ddof=1)),
    }
    if data:
        summary["data_ns"] = [int(v) for v in values]
    return summary


def test_a_benchmark_and_its_only_span_get_one_verdict():
    """Issue 32 item 2: one rule for both rows (samples, else Welch), and a benchmark's only
    span never differs from it on whether it is slower."""
    seen = set()
    for seed, true_change, noise in (
        (11, 0.072, 0.25),
        (12, 0.3, 0.01),
        (13, 0.0, 0.02),
        (14, 0.072, 0.2),
        (15, 0.06, 0.05),
        (16, 0.1, 0.1),
    ):
        rng = np.random.default_rng(seed)
        base_rounds = 1e-3 * (1 + rng.normal(0, noise, 40))
        new_rounds = 1e-3 * (1 + true_change) * (1 + rng.normal(0, noise, 40))
        for data in (True, False):
            base = doc(
                bench("t::only", base_rounds, data=data, spans=[span_of(base_rounds, data=data)])
            )
            new = doc(
                bench("t::only", new_rounds, data=data, spans=[span_of(new_rounds, data=data)])
            )
            result = compare_benchmarks(base, new)
            (b,), (s,) = result["benchmarks"], result["spans"]
            assert b["rule"] == ("samples" if data else "welch")
            assert (b["verdict"] == "slower") == (s["verdict"] == "slower"), (seed, data, b, s)
            seen.add(b["verdict"])
    # A span whose own samples say more than its benchmark's rounds: the rounds decide.
    base = doc(bench("t::only", noisy(1e-3, n=10), spans=[span("work", 1e6, count=5000)]))
    new = doc(
        bench(
            "t::only", noisy(1e-3, n=10, seed=1), spans=[span("work", 1.08e6, count=5000, seed=1)]
        )
    )
    result = compare_benchmarks(base, new)
    (b,), (s,) = result["benchmarks"], result["spans"]
    assert b["verdict"] == s["verdict"] == "same" and s["rule"] == "benchmark"
    assert {"same", "slower"} <= seen  # both kinds of verdict were exercised


def test_an_unchanged_dedupe_like_benchmark_is_not_slower():
    """Issue 32: an unchanged `dedupe` was called slower (+17.2%) by "p50 rose by more than 5%"
    for its span. Rounds that spread (a skewed, noisy benchmark: few rounds) whose median
    happens to sit 17% higher, and a span summary that follows them: neither row is slower,
    by samples or by summary."""
    rng = np.random.default_rng(7)
    base_rounds = 2e-3 * np.exp(rng.normal(0, 0.35, 9))
    new_rounds = base_rounds[rng.permutation(9)] * np.exp(rng.normal(0, 0.1, 9))
    new_rounds *= 1.172 * np.median(base_rounds) / np.median(new_rounds)  # the median: +17.2%
    for data in (True, False):
        base = doc(
            bench("t::dedupe", base_rounds, data=data, spans=[span_of(base_rounds, data=data)])
        )
        new = doc(bench("t::dedupe", new_rounds, data=data, spans=[span_of(new_rounds, data=data)]))
        result = compare_benchmarks(base, new)
        (b,), (s,) = result["benchmarks"], result["spans"]
        assert b["median_s_change"] == pytest.approx(0.172)
        assert b["verdict"] == "same" and s["verdict"] == "same", (data, b, s)
