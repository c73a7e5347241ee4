"""Small things a first user of ``hotspan serve`` met, one test each."""
from __future__ import annotations

import re

import hotspan
from hotspan.report.html import html_report


def test_ranks_read_as_a_count_and_ids_not_as_zero(client, ids, runs_dir):
    """"RANKS 0" read as "no ranks": the card says how many, then which."""
    page = client.get(f"/runs/{ids['base/trace.parquet']}").text
    assert re.search(r'<div class="k">ranks</div><div class="v">1 \(rank 0\)</div>', page)
    page = client.get(f"/runs/{ids['job']}").text
    assert re.search(r'<div class="k">ranks</div><div class="v">2 \(ranks 0, 1\)</div>', page)
    report = html_report(hotspan.load(runs_dir / "job"), sections=("summary",))
    assert '<div class="k">ranks</div><div class="v">2 (ranks 0, 1)</div>' in report


def test_phases_bars_take_the_timelines_colours_and_say_why_they_outlast_the_run(client, ids):
    rid = ids["job"]
    page = client.get(f"/runs/{rid}").text
    timeline = client.get(f"/runs/{rid}/timeline").text
    legend = dict((name, colour) for colour, name in
                  re.findall(r'<span class="lg"><i style="background:(#[0-9a-f]+)"></i>([^<]+)</span>', timeline))
    segments = re.findall(r'<rect class="segment"[^>]*fill="(#[0-9a-f]+)"\s+data-phase="([^"]+)"', page)
    assert segments
    for colour, phase in segments:
        assert colour == legend[phase.removesuffix(" (other)")], phase
    assert "thread time</text>" in page
    assert "adds up the time of all the rank's threads" in page
