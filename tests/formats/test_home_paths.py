"""A path that starts with ``~`` is the home folder's, as the shell and pandas read it, in
every function that takes a path: ``load``, ``export``, ``record``, ``load_counters`` and the
analyses. Was: ``load("~/run")`` said "unknown file extension" and ``export("~/t.json")``
wrote into a folder named ``~`` under the working directory (or failed without one)."""

from __future__ import annotations

import os

import pyarrow.compute as pc
import pytest

import hotspan

pytestmark = pytest.mark.usefixtures("fresh")


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a folder named "~" would appear here
    return folder


def _spans(n: int = 5):
    for i in range(n):
        with hotspan.span("step", "train", arg=i):
            pass
    return hotspan.drain()


@pytest.mark.parametrize("name", ["t.parquet", "t.json", "t.pftrace"])
def test_export_and_load_read_a_tilde_as_the_home_folder(home, name):
    table = _spans()
    written = hotspan.export(table, f"~/{name}")
    assert written == home / name and written.is_file()
    assert not os.path.exists("~")
    back = hotspan.load(f"~/{name}")
    assert back.column("arg").to_pylist() == table.column("arg").to_pylist()


def test_a_recording_to_a_tilde_directory_lands_in_the_home_folder(home):
    with hotspan.record("~/run/", flush_interval=0.1):
        hotspan.counter("queue", 3)
        for _ in range(7):
            with hotspan.span("step", "train"):
                pass
    assert not os.path.exists("~")
    assert any(p.name.endswith(".parquet") for p in (home / "run").iterdir())
    table = hotspan.load("~/run/")
    assert pc.sum(pc.equal(table.column("name"), "step")).as_py() == 7
    stats = hotspan.stats("~/run")
    assert stats.column("count").to_pylist() == [7]
    assert hotspan.load_counters("~/run").column("value").to_pylist() == [3.0]


def test_a_uri_or_a_plain_path_is_left_as_it_is(home):
    from hotspan.formats._uri import local_path

    assert local_path("s3://bucket/~/run") == "s3://bucket/~/run"
    assert local_path("runs/~x") == "runs/~x"
    assert local_path("~") == str(home)
