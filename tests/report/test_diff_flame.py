"""The flame graph of a change, on two generated runs whose change is known: ``forward``
twice as slow, ``backward`` unchanged, ``optimizer`` new, ``io`` gone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.cli import main
from hotspan.formats import export
from hotspan.report.diff_flame import NEW, SAME, diff_flame_html, diff_flame_tree, diff_speedscope

from _util import run_chromium

SCHEMA = json.loads(
    (Path(__file__).parents[1] / "formats" / "speedscope" / "file-format-schema.json").read_text()
)


def run(children: dict[str, float], steps: int = 40, seed: int = 0) -> pa.Table:
    """``steps`` steps, each ``step`` > the children in order, each child lasting its mean
    (ms) with 2% noise; nothing else in a step."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {name: [] for name in TRACE_SCHEMA.names}
    t, span_id = 1_700_000_000_000_000_000, 1
    for _ in range(steps):
        root, start = span_id, t
        span_id += 1
        for name, mean_ms in children.items():
            length = int(mean_ms * 1e6 * rng.normal(1, 0.02))
            for column, value in (
                ("span_id", span_id),
                ("parent_id", root),
                ("name", name),
                ("category", "train/compute"),
                ("start_ns", t),
                ("end_ns", t + length),
                ("duration_ns", length),
                ("depth", 1),
            ):
                rows[column].append(value)
            span_id += 1
            t += length
        for column, value in (
            ("span_id", root),
            ("parent_id", None),
            ("name", "step"),
            ("category", "train"),
            ("start_ns", start),
            ("end_ns", t),
            ("duration_ns", t - start),
            ("depth", 0),
        ):
            rows[column].append(value)
        t += 1000
    n = len(rows["span_id"])
    rows.update(
        thread_id=[1] * n,
        thread_name=["main"] * n,
        pid=[7] * n,
        rank=[0] * n,
        arg=[None] * n,
        error=[False] * n,
    )
    arrays = [
        pa.array(rows[f.name], pa.string()).dictionary_encode()
        if pa.types.is_dictionary(f.type)
        else pa.array(rows[f.name], f.type)
        for f in TRACE_SCHEMA
    ]
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


BASE = {"forward": 10, "backward": 10, "io": 3}
NEW_RUN = {"forward": 20, "backward": 10, "optimizer": 4}


def frames(tree: dict) -> dict[str, int]:
    return {label: i for i, label in enumerate(tree["label"])}


def test_each_frame_says_its_change_and_only_real_changes_are_coloured():
    base, new = run(BASE), run(NEW_RUN, seed=1)
    tree = diff_flame_tree(base, new)
    at = frames(tree)
    forward, backward, step = at["forward"], at["backward"], at["step"]
    # sized by the new run, compared with the same stack in the base run
    change = tree["t"][forward] / tree["b"][forward] - 1
    assert 0.9 < change < 1.1 and tree["d"][forward] == f"{change * 100:+.0f}%"
    assert tree["col"][forward].startswith("hsl(0,")  # slower: red
    assert tree["col"][backward] == SAME  # within the noise: grey, whatever its 1-2% change
    assert tree["col"][step].startswith("hsl(0,")  # the step holds the slower forward
    assert tree["d"][at["optimizer"]] == "new" and tree["col"][at["optimizer"]] == NEW
    assert [g["stack"] for g in tree["gone"]] == [["step [train]", "io [train/compute]"]]
    assert tree["gone"][0]["base_ns"] == int(
        base.filter(pa.compute.equal(base["name"], "io"))["duration_ns"].to_numpy().sum()
    )


def test_an_unchanged_run_colours_nothing():
    base, again = run(BASE, seed=3), run(BASE, seed=4)
    tree = diff_flame_tree(base, again)
    assert set(tree["col"]) == {SAME} and not tree["gone"]


def test_a_faster_frame_is_blue():
    tree = diff_flame_tree(run(NEW_RUN), run({**NEW_RUN, "forward": 5}, seed=2))
    assert tree["col"][frames(tree)["forward"]].startswith("hsl(215,")


def test_the_speedscope_pair_holds_both_runs_and_satisfies_speedscope_s_schema():
    base, new = run(BASE), run(NEW_RUN, seed=1)
    doc = diff_speedscope(base, new)
    jsonschema.validate(doc, SCHEMA)
    assert [p["name"].split(":")[0] for p in doc["profiles"]] == ["base", "new"]
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert len(names) == len(set(names))  # one table of frames, shared
    used = {names[e["frame"]].split(" [")[0] for p in doc["profiles"][1:] for e in p["events"]}
    assert used == {"step", "forward", "backward", "optimizer"}


def test_compare_flame_writes_the_page_and_the_pair(tmp_path, capsys):
    export(run(BASE), tmp_path / "base.parquet")
    export(run(NEW_RUN, seed=1), tmp_path / "new.parquet")
    page = tmp_path / "change.html"
    status = main(
        [
            "compare",
            str(tmp_path / "base.parquet"),
            str(tmp_path / "new.parquet"),
            "--flame",
            str(page),
        ]
    )
    assert status == 1  # forward is slower
    text = page.read_text()
    assert '"d":[' in text and "Gone from the new run" in text
    pair = tmp_path / "change.speedscope.json"
    main(
        [
            "compare",
            str(tmp_path / "base.parquet"),
            str(tmp_path / "new.parquet"),
            "--flame",
            str(pair),
        ]
    )
    jsonschema.validate(json.loads(pair.read_text()), SCHEMA)
    capsys.readouterr()
    status = main(
        [
            "compare",
            str(tmp_path / "base.parquet"),
            str(tmp_path / "new.parquet"),
            "--flame",
            str(tmp_path / "change.png"),
        ]
    )
    assert status == 2
    assert "--flame" in capsys.readouterr().err


@pytest.mark.slow
def test_the_page_draws_each_frame_with_its_change_as_its_title(tmp_path):
    page = tmp_path / "change.html"
    page.write_text(diff_flame_html(run(BASE), run(NEW_RUN, seed=1)))
    result = run_chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr
    titled = dict(re.findall(r'data-label="([^"]+)"[^>]*data-change="([^"]+)"', result.stdout))
    assert titled["optimizer"] == "new"
    assert re.fullmatch(r"\+\d+%", titled["forward"])
    assert re.search(r'title="forward: \+\d+%"', result.stdout)


def test_serve_s_compare_page_shows_the_flame_graph_of_the_change(tmp_path):
    """/compare holds a frame of /compare/flame: the same page, coloured by the verdicts the
    page's table gives."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hotspan.serve.app import create_app

    export(run(BASE), tmp_path / "base.parquet")
    export(run(NEW_RUN, seed=1), tmp_path / "new.parquet")
    with TestClient(create_app(tmp_path)) as client:
        ids = {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}
        base, new = ids["base.parquet"], ids["new.parquet"]
        page = client.get("/compare", params={"base": base, "new": new}).text
        assert f'src="/compare/flame?base={base}&amp;new={new}' in page
        flame = client.get("/compare/flame", params={"base": base, "new": new})
        assert flame.status_code == 200
        data = json.loads(re.search(r'class="fl-data">(.*?)</script>', flame.text, re.S).group(1))[
            "trees"
        ]["merged"]
        assert data["col"] == diff_flame_tree(run(BASE), run(NEW_RUN, seed=1))["col"]
        assert (
            client.get("/compare/flame", params={"base": base, "new": "0" * 16}).status_code == 404
        )
