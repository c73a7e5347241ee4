"""The overhead cases under pytest-benchmark (run: pytest benchmarks/ --benchmark-only).

Each benchmark times a loop of LOOP iterations, so per-span cost = mean / LOOP. Compare the
group's rows with each other (the floor first), not with other runs. The comparison script
bench_overhead.py prints the same cases with their ratios and targets.
"""
from __future__ import annotations

import pytest

import hotspan
from hotspan import _native

LOOP = 10_000


@pytest.fixture(autouse=True)
def _drained():
    hotspan.enable()
    yield
    hotspan.drain()


@pytest.mark.benchmark(group="with")
def test_floor_noop_context_manager(benchmark):
    noop = _native.NoopContext()

    def run():
        for _ in range(LOOP):
            with noop:
                pass

    benchmark(run)


@pytest.mark.benchmark(group="with")
def test_hotspan_reused_span(benchmark):
    s = hotspan.span("x", "c")

    def run():
        for _ in range(LOOP):
            with s:
                pass

    benchmark(run)


@pytest.mark.benchmark(group="with")
def test_hotspan_literal_span(benchmark):
    def run():
        for _ in range(LOOP):
            with hotspan.span("x", "c"):
                pass

    benchmark(run)


@pytest.mark.benchmark(group="with")
def test_hotspan_begin_end(benchmark):
    begin, end = hotspan.begin, hotspan.end

    def run():
        for _ in range(LOOP):
            end(begin("x", "c"))

    benchmark(run)


def _bare():
    return None


@pytest.mark.benchmark(group="call")
def test_bare_call(benchmark):
    def run():
        for _ in range(LOOP):
            _bare()

    benchmark(run)


@pytest.mark.benchmark(group="call")
def test_traced_call(benchmark):
    traced = hotspan.traced(_bare)

    def run():
        for _ in range(LOOP):
            traced()

    benchmark(run)


@pytest.mark.benchmark(group="drain")
def test_drain_100k_spans(benchmark):
    s = hotspan.span("d", "c")

    def setup():
        for _ in range(100_000):
            with s:
                pass
        return (), {}

    table = benchmark.pedantic(hotspan.drain, setup=setup, rounds=10)
    assert table.num_rows == 100_000
