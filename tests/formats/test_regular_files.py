"""Only regular files are read: a FIFO, a socket or a device named like a trace is refused
at once in one line naming it, by every loader and command, never waited on (a FIFO's open
blocks until a writer comes; its read, until data does)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import hotspan
from hotspan.formats import EXTENSIONS, TraceFileError, load
from hotspan.formats.dataset import write_part

WAIT_S = 30  # far longer than any refusal takes: a call still running then is waiting on the file


def _at_once(call):
    """``call()``'s exception, raised within WAIT_S (in a daemon thread: a call that blocks on
    the file fails the test instead of hanging the suite)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(WAIT_S)
    assert outcome, f"still blocked after {WAIT_S} s"
    return outcome[0]


@pytest.mark.parametrize("extension", EXTENSIONS)
def test_load_refuses_a_fifo_of_every_format(tmp_path, extension):
    fifo = tmp_path / f"x{extension}"
    os.mkfifo(fifo)
    error = _at_once(lambda: load(fifo))
    assert isinstance(error, TraceFileError)
    assert str(error) == f"{fifo}: is a FIFO, not a trace file: only regular files are read"


def test_load_refuses_a_socket_and_a_device_through_links(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s.json"))
    try:
        error = _at_once(lambda: load(tmp_path / "s.json"))
        assert "is a socket, not a trace file" in str(error)
    finally:
        server.close()
    (tmp_path / "null.parquet").symlink_to("/dev/zero")  # would read forever
    error = _at_once(lambda: load(tmp_path / "null.parquet"))
    assert str(error) == f"{tmp_path / 'null.parquet'}: is a character device, not a trace file: only regular files are read"


def test_a_fifo_named_like_a_part_is_refused_by_dataset_readers(tmp_path):
    hotspan.drain()
    with hotspan.span("one"):
        pass
    write_part(hotspan.drain(), tmp_path, rank=0, pid=1, seq=0)
    assert load(tmp_path).num_rows == 1
    fifo = tmp_path / "part-r0-2-000000.parquet"
    os.mkfifo(fifo)
    for call in (lambda: load(tmp_path), lambda: hotspan.stats(tmp_path)):
        error = _at_once(call)
        assert isinstance(error, TraceFileError)
        assert str(error) == f"{fifo}: is a FIFO, not a trace file: only regular files are read"


def test_hotspan_load_and_stats_refuse_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "x.parquet")
    for call in (lambda: hotspan.load(tmp_path / "x.parquet"), lambda: hotspan.stats(tmp_path / "x.parquet")):
        assert "is a FIFO" in str(_at_once(call))


@pytest.mark.parametrize("command", [
    ("stats", "{fifo}.json"), ("stats", "{fifo}.parquet"), ("export", "{fifo}.json", "{out}"),
    ("gantt", "{fifo}.json"), ("report", "{fifo}.json", "-o", "{out}.html"),
    ("compare", "{fifo}.json", "{fifo}.parquet"), ("recover", "{fifo}.flight", "-o", "{out}"),
    ("top", "{fifo}.flight", "--once"),
])
def test_every_command_refuses_a_fifo_at_once_with_exit_2(tmp_path, command):
    for extension in (".json", ".parquet", ".flight"):
        os.mkfifo(tmp_path / f"fifo{extension}")
    args = [a.format(fifo=tmp_path / "fifo", out=tmp_path / "out.parquet") for a in command]
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hotspan", *args], capture_output=True, text=True,
                            timeout=WAIT_S + 30)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"hotspan {command[0]}: {tmp_path / 'fifo'}"), lines
    assert ": is a FIFO, not a trace file: only regular files are read" in lines[0]
    assert time.monotonic() - started < WAIT_S
