"""Shared fixtures: every recorder test starts from an empty, enabled recorder."""

from __future__ import annotations

import pytest

import hotspan
from hotspan import _native

DEFAULT_CAPACITY = 1024  # records per block
DEFAULT_MEMORY_CAP = 64 << 20


@pytest.fixture
def fresh():
    """Drain what earlier tests left, restore defaults, and drain again afterwards."""
    hotspan.enable()
    _native._set_real_clock()
    hotspan.drain()
    yield
    hotspan.enable()
    _native._set_real_clock()
    hotspan.configure(capacity=DEFAULT_CAPACITY, memory_cap=DEFAULT_MEMORY_CAP, drain_thread=True)
    hotspan.drain()
