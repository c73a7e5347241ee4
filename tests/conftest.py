"""Shared fixtures: every recorder test starts from an empty, enabled recorder; and a guard:
no test leaves a recording (or any other streaming consumer) running, nor drops spans it did
not mean to (either would end a green run with the recorder's exit line,
``hotspan: N spans dropped ...``, instead of pytest's own)."""

from __future__ import annotations


import pytest

import hotspan
from hotspan import testing
from hotspan.testing import set_real_clock

from _util import left_running

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


# --------------------------------------------------------------------------- the guard


def _unexpected_drops(before: tuple[int, int]) -> int:
    from hotspan import _api

    dropped, expected = before
    return (hotspan.dropped() - dropped) - (_api.dropped_expected - expected)


def _counts() -> tuple[int, int]:
    from hotspan import _api

    return hotspan.dropped(), _api.dropped_expected


@pytest.fixture
def expected_drops():
    """The test drops spans on purpose (it fills the memory cap): they are left out of the
    exit line and of the guard's count (``hotspan.testing.expected_drops``)."""
    with testing.expected_drops():
        yield


@pytest.fixture(autouse=True)
def _leaves_nothing_running(request):
    """Fails the test that leaves a recording or another consumer running, or that drops
    spans without saying so (the ``expected_drops`` fixture): either is what ended green runs
    with ``hotspan: 35,669,448 spans dropped at the memory cap``."""
    before = _counts()
    yield
    problems = left_running()
    lost = _unexpected_drops(before)
    if lost > 0:
        problems.append(
            f"{lost:,} spans dropped that the test did not expect (spans left undrained past "
            "the memory cap? a test that fills it on purpose takes the expected_drops fixture)"
        )
    if problems:
        pytest.fail(f"{request.node.nodeid} left behind: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _session_leaves_nothing_running():
    """The same at the end of the session (session fixtures included), so that the last line
    of a green run is pytest's."""
    before = _counts()
    yield
    problems = left_running()
    lost = _unexpected_drops(before)
    if lost > 0:
        problems.append(f"{lost:,} spans dropped that no test expected")
    if problems:
        pytest.fail("the test session left behind: " + "; ".join(problems), pytrace=False)
