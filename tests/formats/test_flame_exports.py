"""Flame-graph exports: collapsed stacks (``.folded``) and speedscope (``.speedscope.json``).

The folded self times must add up to ``stats``' self time of each (category, name); the
speedscope file must satisfy speedscope's own published schema (vendored beside this file,
with its licence) and its events must nest, so that speedscope opens it.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import hotspan
from hotspan.analysis.flamegraph import flame_tree, frame_label, span_self_ns
from hotspan.cli import main
from hotspan.formats import TraceFileError, export, load

SCHEMA = json.loads((Path(__file__).parent / "speedscope" / "file-format-schema.json").read_text())


@pytest.fixture(scope="module")
def trace():
    """Two threads of nested steps (one step fails), and asyncio tasks whose span trees
    overlap on one thread (speedscope needs those on profiles of their own)."""
    hotspan.enable()
    hotspan.drain()

    def worker(k: int) -> None:
        hotspan.set_thread_name(f"worker-{k}")
        for i in range(3):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    sum(range(30_000))
                    with hotspan.span("matmul"):
                        sum(range(10_000))
                with hotspan.span("allreduce", "comms", arg=1024):
                    sum(range(10_000))
                hotspan.instant("mark")
                if k == 1 and i == 1:
                    try:
                        with hotspan.span("flaky", "compute"):
                            raise RuntimeError
                    except RuntimeError:
                        pass

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def task(k: int) -> None:
        with hotspan.span(f"request-{k}", "serve"):
            await asyncio.sleep(0.002)
            with hotspan.span("db", "io"):
                await asyncio.sleep(0.002)

    async def both() -> None:
        await asyncio.gather(task(0), task(1))

    asyncio.run(both())
    return hotspan.drain()


def folded_lines(path: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in path.read_text().splitlines():
        stack, value = line.rsplit(" ", 1)
        out.append((stack.split(";"), int(value)))
    return out


def test_folded_self_times_add_up_to_stats(trace, tmp_path):
    path = export(trace, tmp_path / "trace.folded")
    lines = folded_lines(path)
    assert lines and all(value > 0 for _stack, value in lines)
    by_leaf: dict[str, int] = defaultdict(int)
    for stack, value in lines:
        by_leaf[stack[-1]] += value
    expected = {frame_label(r["name"], r["category"]): r["self_ns"]
                for r in hotspan.stats(trace).to_pylist() if r["self_ns"] > 0}
    assert dict(by_leaf) == expected
    # The stacks follow the span tree: matmul only ever under forward under step.
    matmul = [stack for stack, _v in lines if stack[-1].startswith("matmul")]
    assert matmul == [["step [train]", "forward [train/compute]", "matmul [train/compute]"]]
    # Every span's self time is in: the lines add up to the time the roots cover.
    assert sum(v for _s, v in lines) == int(span_self_ns(trace).sum())


def test_flame_tree_per_rank_and_thread(trace):
    merged = flame_tree(trace)
    per_thread = flame_tree(trace, per="thread")
    assert merged.total_ns[0] == per_thread.total_ns[0] == int(span_self_ns(trace).sum())
    lanes = [label for label, kind in zip(per_thread.label, per_thread.kind) if kind == "lane"]
    assert any("worker-0" in label for label in lanes) and any("worker-1" in label for label in lanes)
    # A node's total is its own self time plus its children's totals.
    for node in range(len(merged)):
        children = merged.parent == node
        assert merged.total_ns[node] == merged.self_ns[node] + merged.total_ns[children].sum()
    with pytest.raises(ValueError, match="per must be one of"):
        flame_tree(trace, per="host")


def check_nesting(profile: dict, frames: int) -> dict[int, int]:
    """Replays a profile's events as speedscope does; returns the time per frame."""
    stack: list[tuple[int, float]] = []
    time_per_frame: dict[int, int] = defaultdict(int)
    last = profile["startValue"]
    for event in profile["events"]:
        assert event["at"] >= last, "events out of order"
        last = event["at"]
        assert 0 <= event["frame"] < frames
        if event["type"] == "O":
            stack.append((event["frame"], event["at"]))
        else:
            assert stack, "a close without an open"
            frame, opened = stack.pop()
            assert frame == event["frame"], "closes a frame that is not the innermost open one"
            time_per_frame[frame] += event["at"] - opened
    assert not stack, "frames left open"
    assert last <= profile["endValue"]
    return time_per_frame


def test_speedscope_file_validates_and_nests(trace, tmp_path):
    path = export(trace, tmp_path / "run.speedscope.json")
    doc = json.loads(path.read_text())
    jsonschema.Draft6Validator(SCHEMA).validate(doc)
    assert doc["name"] == "run"
    frames = [f["name"] for f in doc["shared"]["frames"]]
    assert len(set(frames)) == len(frames)
    time_per_frame: dict[str, int] = defaultdict(int)
    for profile in doc["profiles"]:
        assert profile["type"] == "evented" and profile["unit"] == "nanoseconds"
        for frame, t in check_nesting(profile, len(frames)).items():
            time_per_frame[frames[frame]] += t
    # Every span with a duration is there once, whole: per frame, the summed durations.
    expected = {frame_label(r["name"], r["category"]): r["total_ns"]
                for r in hotspan.stats(trace).to_pylist() if r["total_ns"] > 0}
    assert dict(time_per_frame) == expected
    # One profile per thread, the overlapping asyncio trees on a lane of their own.
    names = [p["name"] for p in doc["profiles"]]
    threads = {(r, t) for r, t in zip(trace.column("rank").to_pylist(), trace.column("thread_id").to_pylist())}
    assert len(names) == len(threads) + 1
    assert any("worker-0" in n for n in names) and any("lane 1" in n for n in names)


def test_exports_from_the_command_line_and_never_load_back(trace, tmp_path, capsys):
    source = export(trace, tmp_path / "trace.parquet")
    for name in ("trace.folded", "trace.speedscope.json"):
        assert main(["export", str(source), str(tmp_path / name)]) == 0
        with pytest.raises(TraceFileError, match=f"{name}: .*never loaded"):
            load(tmp_path / name)
    assert "spans" in capsys.readouterr().out


def test_empty_and_instant_only_tables(trace, tmp_path):
    instants = trace.filter(np.asarray(trace.column("duration_ns")) == 0)
    assert instants.num_rows
    doc = json.loads(export(instants, tmp_path / "i.speedscope.json").read_text())
    jsonschema.Draft6Validator(SCHEMA).validate(doc)
    assert doc["profiles"] == []
    assert export(trace.slice(0, 0), tmp_path / "e.folded").read_text() == ""
