"""benchmarks/docs_performance.py writes the head of docs/performance.md (one run's figures)
and nothing else: the sections after it are measured and written by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "performance.md"

FIGURES = {
    "ns_per_iter": {"floor: no-op C context manager": 100.0, "hotspan: reused span": 90.0},
    "ratios": {"reused / floor": 0.9},
    "paired_ratios": {"reused / floor": 0.8},
    "drain": {
        "spans": 1000,
        "drain_spans_per_s": 2e7,
        "drain_spans_per_s_first": 5e6,
        "bytes_per_drained_span_native": 32.0,
    },
}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "docs_performance", ROOT / "benchmarks" / "docs_performance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _head(script, page: str) -> str:
    return page[page.index(script.BEGIN) : page.index(script.END) + len(script.END)]


def test_the_page_is_rewritten_between_its_markers_only(script):
    page = PAGE.read_text(encoding="utf-8")
    head = script.render(FIGURES, {"CPU": "test"}, "python benchmarks/bench_overhead.py")
    written = script.splice(page, head)
    before, after = page.split(_head(script, page)), written.split(_head(script, written))
    assert before == after  # the hand-written sections (and anything above) byte for byte
    assert "| hotspan: reused span | 90.0 | 0.90 |" in _head(script, written)
    assert "## Export and load" in after[1] and "## Export and load" not in _head(script, written)
    # the page's own head put back gives the page back: the markers' lines are exact
    inside = _head(script, page)[len(script.BEGIN) + 1 : -len(script.END)]
    assert script.splice(written, inside) == page


def test_a_page_without_markers_is_refused_and_left_alone(script, tmp_path, monkeypatch):
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\n## Measured by hand\n\nkeep me\n", encoding="utf-8")
    run = tmp_path / "run.json"
    run.write_text(json.dumps(FIGURES), encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["docs_performance.py", "--from", str(run), "-o", str(page)])
    assert script.main() == 2
    assert page.read_text(encoding="utf-8").endswith("keep me\n")
    with pytest.raises(ValueError, match="not overwriting"):
        script.splice(page.read_text(encoding="utf-8"), "# Performance\n")


def test_a_new_page_gets_the_head_between_markers(script, tmp_path, monkeypatch):
    page = tmp_path / "new.md"
    run = tmp_path / "run.json"
    run.write_text(json.dumps(FIGURES), encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["docs_performance.py", "--from", str(run), "-o", str(page)])
    assert script.main() == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith(script.BEGIN + "\n# Performance\n")
    assert text.rstrip().endswith(script.END)
