"""Shared fixtures: every recorder test starts from an empty, enabled recorder."""
from __future__ import annotations

import pytest

import hotspan
from hotspan.testing import set_real_clock

DEFAULT_CAPACITY = 1024  # records per block
DEFAULT_MEMORY_CAP = 64 << 20


@pytest.fixture
def fresh():
    """Drain what earlier tests left, restore defaults, and drain again afterwards."""
    hotspan.enable()
    set_real_clock()
    hotspan.drain()
    yield
    hotspan.enable()
    set_real_clock()
    hotspan.configure(capacity=DEFAULT_CAPACITY, memory_cap=DEFAULT_MEMORY_CAP, drain_thread=True)
    hotspan.drain()


@pytest.fixture(scope="session")
def fake_libcuda_path(tmp_path_factory):
    """The stand-in libcuda.so (tests/devices/fake_libcuda.c), built once a session."""
    from _fake_libcuda import build

    return build(tmp_path_factory.mktemp("libcuda"))


@pytest.fixture
def gpu(fake_libcuda_path, fresh):
    """The stand-in CUDA driver, loaded by the plug-in for this test (``_fake_libcuda.FakeDriver``)."""
    from _fake_libcuda import FakeDriver

    driver = FakeDriver(fake_libcuda_path)
    driver.start()
    yield driver
    driver.stop()
