"""The span table's schema (``SPAN_SCHEMA``): the contract every part of hotspan reads and writes.

A module of its own because it needs pyarrow, which ``import hotspan`` does not load.
"""

from __future__ import annotations

from ._schema import SPAN_SCHEMA

__all__ = ["SPAN_SCHEMA"]
