"""The flame graph on serve's run page, and the flame exports as downloads."""
from __future__ import annotations

import json
import re

import pytest
from _util import run_chromium

import hotspan
from hotspan.analysis.flamegraph import flame_tree


@pytest.mark.slow
def test_run_page_shows_the_flame_graph(server, tmp_path, ids, runs_dir):
    rid = ids["job"]
    page = run_chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", f"{server.url}runs/{rid}").stdout
    assert f'<iframe id="flame" class="timeline" src="/runs/{rid}/flame"' in page
    result = run_chromium(tmp_path, "--virtual-time-budget=5000", "--window-size=1400,900", "--dump-dom",
                          f"{server.url}runs/{rid}/flame")
    assert result.returncode == 0, result.stderr
    drawn = set(re.findall(r'<div class="fr[^"]*" data-node="\d+" data-label="([^"]*)"', result.stdout))
    tree = flame_tree(hotspan.load(runs_dir / "job"))
    # Every frame at least a pixel wide (in 1,400) is drawn; nothing that is not in the tree.
    wide = {label for label, total in zip(tree.label, tree.total_ns.tolist()) if total / tree.total_ns[0] > 1 / 1000}
    assert wide <= drawn <= set(tree.label)
    assert len(wide) >= 3
    # Two ranks: the per-rank tree is offered.
    assert 'data-tree="rank">per rank</button>' in result.stdout


def test_flame_downloads(client, ids, runs_dir):
    rid = ids["base/trace.parquet"]
    table = hotspan.load(runs_dir / "base" / "trace.parquet")
    folded = client.get(f"/v1/traces/{rid}/download", params={"format": "folded"})
    assert folded.status_code == 200 and folded.headers["content-type"].startswith("text/plain")
    total = sum(int(line.rsplit(" ", 1)[1]) for line in folded.text.splitlines())
    assert total == int(flame_tree(table).total_ns[0])
    doc = client.get(f"/v1/traces/{rid}/download", params={"format": "speedscope"})
    assert doc.status_code == 200 and 'filename="trace.speedscope.json"' in doc.headers["content-disposition"]
    assert json.loads(doc.content)["profiles"][0]["type"] == "evented"
