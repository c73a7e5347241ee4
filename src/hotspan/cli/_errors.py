"""What every command module shares with the parser: bad input is a ``CliError`` (one line
on stderr, exit status ``EXIT_BAD_INPUT``), and an output path is checked by ``check_output``
before any work. A module of its own, so that the command modules (``cli/<command>.py``),
which ``commands.py`` assembles into the parser, can raise it without importing
``commands.py`` back (no import cycle)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CliError", "EXIT_BAD_INPUT", "check_dataset", "check_output"]

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


def check_output(path: str | os.PathLike[str], *, trace: bool = True) -> Path:
    """An output path, checked before any work: known format, not a directory; its missing
    directories are made now."""
    path = Path(path)
    if trace:
        from ..formats import exporter_for

        try:
            exporter_for(path)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def check_dataset(path: str) -> str:
    """A dataset argument (a directory, or a URI left to its file system): a local path that is
    missing or not a directory is one line, naming it, before any work."""
    if "://" in path:
        return path
    if not os.path.exists(path):
        raise CliError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise CliError(
            f"{path}: a file, not a dataset directory (this command reads a directory of parts)"
        )
    return path
