"""The ``hotspan`` command: a parser and thin commands over the library."""

from __future__ import annotations

from ._commands import build_parser, main

__all__ = ["build_parser", "main"]
