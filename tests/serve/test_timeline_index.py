"""serve's timeline index persisted beside the run (issue 33, item 1): a server started again
reads it back instead of reading every span; a run that changed (a new part) never gets its
old index: it is built again, and answers with the new spans; a file of another version
under the current version's name is not read."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from hotspan.analysis.timeline import TimelineIndex, run_version, timeline
from hotspan.formats.dataset import write_part
from hotspan.serve import _queries as queries
from hotspan.serve.app import create_app

from ._serving import record_steps


def _forget() -> None:
    """As a server started again: no index, no answer in memory."""
    with queries._index_lock:
        queries._indexes.clear()
    with queries._cache_lock:
        queries._cache.clear()
        queries._views.clear()


def _saved(run_dir):
    return sorted(run_dir.glob(f"{queries.INDEX_PREFIX}*.npz"))


def _files(run):
    return [str(path) for path, _rank in run.parts]


def test_the_index_is_kept_beside_the_run_and_read_back(tmp_path):
    run_dir = tmp_path / "run"
    table = record_steps(6)
    write_part(table, run_dir, rank=0, pid=11, seq=0)
    catalog = create_app(tmp_path).state.catalog
    (run,) = catalog.scan()
    _forget()
    built = queries.timeline_index(run)
    (saved,) = _saved(run_dir)
    assert saved.name == f"{queries.INDEX_PREFIX}{run_version(_files(run))}.npz"
    assert [r.path for r in catalog.scan()] == ["run"]  # the index is not a run
    _forget()
    # not waiting: a build would answer None at once; the saved index is read on the spot
    loaded = queries.timeline_index(run, wait=False)
    assert loaded is not None and loaded is not built
    assert loaded.view(width=64) == built.view(width=64) == timeline(table, width=64)
    assert _saved(run_dir) == [saved]
    # a view finer than a bin: from the span blocks kept beside it, as the spans answer it
    assert loaded.blocks is not None
    assert sorted(p.name for p in run_dir.glob(f"{queries.INDEX_PREFIX}*")) == [
        saved.with_suffix(".blocks").name,
        saved.name,
    ]
    first, last = loaded.window
    low = first + (last - first) // 3
    high = low + max((last - first) // 100_000, 2)
    assert loaded.view(low, high, width=64) == timeline(table, low, high, 64)


def test_a_new_part_makes_the_saved_index_stale_and_it_is_built_again(tmp_path):
    run_dir = tmp_path / "run"
    first = record_steps(4)
    write_part(first, run_dir, rank=0, pid=11, seq=0)
    catalog = create_app(tmp_path).state.catalog
    (run,) = catalog.scan()
    _forget()
    queries.timeline_index(run)
    (old,) = _saved(run_dir)
    second = record_steps(5)
    write_part(second, run_dir, rank=0, pid=11, seq=1)
    (run,) = catalog.scan()
    _forget()
    assert queries.timeline_index(run, wait=False) is None  # nothing saved for this version
    index = queries.timeline_index(run)  # waits for the build under way
    both = pa.concat_tables([first, second], promote_options="permissive")
    assert index.view(width=64) == timeline(both, width=64)
    counted = sum(
        len(t["spans"]) + sum(p["count"] for p in t["pixels"])
        for t in index.view(width=100)["tracks"]
    )
    assert counted == both.num_rows
    (new,) = _saved(run_dir)  # the old version's index replaced, and its span blocks
    assert new != old and not old.exists() and not old.with_suffix(".blocks").exists()


def test_an_index_of_another_version_under_this_versions_name_is_never_read(tmp_path):
    run_dir = tmp_path / "run"
    first = record_steps(4)
    write_part(first, run_dir, rank=0, pid=11, seq=0)
    catalog = create_app(tmp_path).state.catalog
    (run,) = catalog.scan()
    _forget()
    queries.timeline_index(run)
    (old,) = _saved(run_dir)
    kept = tmp_path / "old.npz"
    shutil.copy(old, kept)
    second = record_steps(3)
    write_part(second, run_dir, rank=0, pid=11, seq=1)
    (run,) = catalog.scan()
    version = run_version(_files(run))
    shutil.copy(kept, run_dir / f"{queries.INDEX_PREFIX}{version}.npz")  # the wrong content
    assert TimelineIndex.load(run_dir / f"{queries.INDEX_PREFIX}{version}.npz", version) is None
    _forget()
    index = queries.timeline_index(run)
    both = pa.concat_tables([first, second], promote_options="permissive")
    assert index.view(width=64) == timeline(both, width=64)
    (saved,) = _saved(run_dir)  # written again, right this time
    assert TimelineIndex.load(saved, version) is not None


def test_a_run_that_cannot_be_written_beside_keeps_no_index_and_still_answers(tmp_path):
    import os

    run_dir = tmp_path / "run"
    table = record_steps(4)
    write_part(table, run_dir, rank=0, pid=11, seq=0)
    catalog = create_app(tmp_path).state.catalog
    (run,) = catalog.scan()
    _forget()
    os.chmod(run_dir, 0o555)
    try:
        if os.access(run_dir, os.W_OK):  # root writes anyway
            pytest.skip("this user writes into a read-only folder")
        index = queries.timeline_index(run)
        assert index.view(width=64) == timeline(table, width=64)
        assert _saved(run_dir) == []
    finally:
        os.chmod(run_dir, 0o755)


def test_an_index_saved_by_an_earlier_format_is_built_again(tmp_path):
    """A run's saved index of the first format (as the previous server wrote it), under this
    version's name, is not read: the server builds the index again, answers with the spans'
    own view and saves the new format in its place."""
    import json

    import numpy as np

    run_dir = tmp_path / "run"
    table = record_steps(4)
    write_part(table, run_dir, rank=0, pid=11, seq=0)
    catalog = create_app(tmp_path).state.catalog
    (run,) = catalog.scan()
    _forget()
    queries.timeline_index(run)
    (saved,) = _saved(run_dir)
    arrays = dict(np.load(saved))
    head = json.loads(arrays["head"].tobytes())
    head["format"] = 1
    arrays["head"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
    np.savez(saved, **arrays)
    _forget()
    version = run_version(_files(run))
    assert TimelineIndex.load(saved, version) is None
    index = queries.timeline_index(run)
    assert index.levels[0].width == index.bins  # built by this format
    assert index.view(width=64) == timeline(table, width=64)
    (again,) = _saved(run_dir)
    assert again == saved
    assert TimelineIndex.load(saved, version) is not None  # the new format written over it
