"""The overhead cases under pytest-benchmark (run: pytest benchmarks/ --benchmark-only).

Each benchmark times a loop of LOOP iterations, so per-span cost = mean / LOOP. Compare the
group's rows with each other (the floor first), not with other runs. The comparison script
bench_overhead.py prints the same cases with their ratios and targets.

Fixed rounds (``benchmark.pedantic``), not pytest-benchmark's calibrated ones: a benchmark
records LOOP x (ROUNDS + WARMUP) spans with no drain in between, which must stay under the
recorder's memory cap (about 2 M spans at the default 64 MiB). Calibrated to one second, a
fast machine recorded ten times that, and most rounds timed the path that drops a span at
the cap rather than the one that records it.

With the hotspan plugin (``pytest benchmarks/ --benchmark-only --hotspan
--benchmark-autosave``), every span of a benchmark therefore reaches its part of the
dataset, none dropped, and each benchmark's JSON carries the summary of its spans: ``c/x``
is the recorded duration of the empty span (the part of its cost that falls inside its own
bounds); the floor cases record none. ``hotspan compare`` takes two such JSON files. Under
``--hotspan`` the plugin reads spans through a cursor of its own, so ``drain()`` is the
hub's drain (it hands each table to every cursor): test_drain_100k_spans then times what a
drain costs while something streams; compare it only with runs made the same way.
"""

from __future__ import annotations

import pytest

import hotspan
from hotspan.testing import NoopContext

LOOP = 10_000
ROUNDS = 100
WARMUP = 5
# 1.05 M spans: under the default memory cap (~2 M spans), so no round drops any.
assert LOOP * (ROUNDS + WARMUP) < 1_500_000
# The drain case: its spans are recorded in the (untimed) setup of each round and queued, as
# Arrow tables, for the plugin's cursor under --hotspan: 6 x 100 K spans stay under that
# cursor's cap too (64 MiB, ~85 bytes a span).
DRAIN_ROUNDS = 6


@pytest.fixture(autouse=True)
def _drained():
    hotspan.enable()
    hotspan.drain()  # every benchmark starts with the recorder empty: its spans all fit
    yield
    hotspan.drain()


def timed(benchmark, run):
    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=WARMUP)


@pytest.mark.benchmark(group="with")
def test_floor_noop_context_manager(benchmark):
    noop = NoopContext()

    def run():
        for _ in range(LOOP):
            with noop:
                pass

    timed(benchmark, run)


@pytest.mark.benchmark(group="with")
def test_hotspan_reused_span(benchmark):
    s = hotspan.span("x", "c")

    def run():
        for _ in range(LOOP):
            with s:
                pass

    timed(benchmark, run)


@pytest.mark.benchmark(group="with")
def test_hotspan_literal_span(benchmark):
    def run():
        for _ in range(LOOP):
            with hotspan.span("x", "c"):
                pass

    timed(benchmark, run)


@pytest.mark.benchmark(group="with")
def test_hotspan_begin_end(benchmark):
    begin, end = hotspan.begin, hotspan.end

    def run():
        for _ in range(LOOP):
            end(begin("x", "c"))

    timed(benchmark, run)


def _bare():
    return None


@pytest.mark.benchmark(group="call")
def test_bare_call(benchmark):
    def run():
        for _ in range(LOOP):
            _bare()

    timed(benchmark, run)


@pytest.mark.benchmark(group="call")
def test_traced_call(benchmark):
    traced = hotspan.traced(_bare)

    def run():
        for _ in range(LOOP):
            traced()

    timed(benchmark, run)


@pytest.mark.benchmark(group="drain")
def test_drain_100k_spans(benchmark):
    s = hotspan.span("d", "c")

    def setup():
        for _ in range(100_000):
            with s:
                pass
        return (), {}

    table = benchmark.pedantic(hotspan.drain, setup=setup, rounds=DRAIN_ROUNDS)
    assert table.num_rows == 100_000
