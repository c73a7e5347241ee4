"""An export over an existing file: the file it replaces is held open across the rename and
closed on a short-lived thread, so freeing its pages (~20 ms for 69 MB on ext4) is no part
of the export. What holds as before: the new file is whole and on disk when ``export``
returns, the old one is never seen half-written, and no descriptor is left behind."""

from __future__ import annotations

import os
import sys
import threading

import pytest

import hotspan
from hotspan.formats._base import atomic_path, wait_for_released

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@linux_only
@pytest.mark.parametrize("extension", [".pftrace", ".json", ".parquet"])
def test_replacing_leaks_no_descriptor(extension, spans, tmp_path):
    path = tmp_path / f"trace{extension}"
    hotspan.export(spans, path)
    assert wait_for_released(30)
    before = _open_fds()
    old_inode = path.stat().st_ino
    for _ in range(3):
        hotspan.export(spans, path)
        assert path.stat().st_ino != old_inode  # a new file under the name each time
        old_inode = path.stat().st_ino
    # the closer thread says when the replaced files are closed: no sleep
    assert wait_for_released(30), "the replaced files were never closed"
    assert _open_fds() == before
    assert hotspan.load(path).num_rows == spans.num_rows


@linux_only
def test_a_reader_of_the_old_file_still_reads_it_whole(tmp_path):
    path = tmp_path / "t.bin"
    path.write_bytes(b"old" * 1000)
    with open(path, "rb") as reader:
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"new")
        assert reader.read() == b"old" * 1000
    assert path.read_bytes() == b"new"
    assert wait_for_released(30)


@linux_only
def test_a_fifo_in_the_way_is_replaced_without_blocking(tmp_path):
    """The old file is opened without blocking (``O_NONBLOCK``): a FIFO at the target (no
    writer) is replaced as before rather than waited on."""
    path = tmp_path / "t.bin"
    os.mkfifo(path)
    done = threading.Event()

    def replace() -> None:
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"new")
        done.set()

    worker = threading.Thread(target=replace, daemon=True)
    worker.start()
    assert done.wait(30), "blocked on the FIFO it replaces"
    assert path.read_bytes() == b"new"
    assert wait_for_released(30)


@linux_only
def test_a_link_is_replaced_not_its_target(tmp_path):
    """As ``rename`` does: the link's name gets the new file; the file it pointed to is
    neither opened through it nor changed."""
    target = tmp_path / "target.bin"
    target.write_bytes(b"target")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    before = _open_fds()
    with atomic_path(link) as tmp:
        tmp.write_bytes(b"new")
    assert not link.is_symlink() and link.read_bytes() == b"new"
    assert target.read_bytes() == b"target"
    assert wait_for_released(30) and _open_fds() == before


@linux_only
def test_a_forked_child_closes_its_copies(tmp_path):
    """A child forked while a replaced file is still held closes its copy (no thread of the
    parent's runs there to do it)."""
    path = tmp_path / "t.bin"
    path.write_bytes(b"old")
    read, write = os.pipe()
    with atomic_path(path) as tmp:
        tmp.write_bytes(b"new")
        from hotspan.formats import _base

        held = _base._hold_replaced(path)  # held as across the rename
    assert held is not None
    pid = os.fork()
    if pid == 0:  # the child: is the held descriptor still open here?
        try:
            os.fstat(held)
            os.write(write, b"open")
        except OSError:
            os.write(write, b"closed")
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 16) == b"closed"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
        _base._release_later(held)
    assert wait_for_released(30)
