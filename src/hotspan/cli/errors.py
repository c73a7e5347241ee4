"""What every command module shares with the parser: bad input is a ``CliError`` (one line
on stderr, exit status ``EXIT_BAD_INPUT``). A module of its own, so that command modules
(``cli/<command>.py``) which ``commands.py`` registers can raise it without importing
``commands.py`` back (no import cycle)."""
from __future__ import annotations

__all__ = ["CliError", "EXIT_BAD_INPUT"]

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""
