"""The command line's bad-input error, apart from cli/commands.py so that a command's own
module (cli/<command>.py, registered by commands.py) can raise it without an import cycle."""
from __future__ import annotations

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""
