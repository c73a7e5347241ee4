"""The span table's schema (``SPAN_SCHEMA``) and the counter table's (``COUNTER_SCHEMA``): the contract every part of hotspan reads and writes.

A module of its own because it needs pyarrow, which ``import hotspan`` does not load.
"""

from __future__ import annotations

from ._schema import COUNTER_SCHEMA, SPAN_SCHEMA

__all__ = ["COUNTER_SCHEMA", "SPAN_SCHEMA"]
