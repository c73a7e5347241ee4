"""A pytest plugin: the spans each test records, kept per test (``pytest --hotspan``).

    pytest --hotspan                  # .hotspan/<session>/, one part per test with spans
    pytest --hotspan=runs/            # runs/<session>/
    pytest --hotspan --benchmark-autosave   # and a summary per span in each benchmark's JSON

Registered through the ``pytest11`` entry point, and off unless asked: loading it defines
the option and nothing else (no hook runs per test, no pyarrow, no numpy; ``import
hotspan`` stays as light as it is). With ``--hotspan``:

- Every test's spans (its setup, call and teardown, fixtures included: a module fixture's
  setup lands with the first test that uses it, its teardown with the last) are written to
  ``DIR/<session>/`` with hotspan's own dataset writer, one part per test that recorded a
  span, the test's node id in the part's metadata (``hotspan.part`` -> ``"test"``, with its
  ``"outcome"``). ``<session>`` is new for every run (time, pid, random bits): nothing is
  ever written over. Read it with ``hotspan stats DIR/<session>`` or ``hotspan.load``.
- With pytest-benchmark, a benchmark's spans (those of its call, calibration and warm-up
  rounds included) are summarised per category/name (count, p50, p99, total, mean and
  standard deviation, by ``hotspan.stats``, and up to :data:`SPAN_SAMPLES` of their
  durations) into ``benchmark.extra_info["hotspan"]``, with the machine's speed while the
  benchmark ran (``"machine"``: ``hotspan._machine.measure``, its calibration loop and CPU
  contention), so they are in the JSON that ``--benchmark-json`` / ``--benchmark-autosave``
  write; ``hotspan compare A.json B.json`` compares two of them.

The plugin reads spans through a cursor of its own (``recording.hub``): a test calling
``hotspan.drain()``, a ``record()`` or a subscriber still gets every span. Spans the
recorder could not keep (the memory cap reached between two drains) are counted per test
and reported, never silently missing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

__all__ = [
    "DEFAULT_DIR",
    "EXTRA_INFO_KEY",
    "PART_TEST_KEY",
    "SPAN_SAMPLES",
    "pytest_addoption",
    "pytest_configure",
    "summary",
]

DEFAULT_DIR = ".hotspan"
#: The key of ``benchmark.extra_info`` the summary goes under.
EXTRA_INFO_KEY = "hotspan"
#: At most this many durations of a span are kept in a benchmark's summary (evenly spaced
#: order statistics of all of them): ``compare`` tests on them.
SPAN_SAMPLES = 200
#: In a part's ``hotspan.part`` metadata: the node id of the test whose spans it holds.
PART_TEST_KEY = "test"
_PLUGIN_NAME = "hotspan-recorder"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hotspan", "hotspan: spans recorded per test")
    group.addoption(
        "--hotspan",
        action="store",
        nargs="?",
        const=DEFAULT_DIR,
        default=None,
        metavar="DIR",
        dest="hotspan",
        help=f"write the spans each test records to DIR/<session>/ (default DIR: {DEFAULT_DIR}), one dataset part "
        "per test; with pytest-benchmark, summarise each benchmark's spans into its extra_info. Write "
        "--hotspan=DIR (with '='), or put --hotspan after the test paths: it takes the next word as DIR.",
    )


def pytest_configure(config: pytest.Config) -> None:
    root = config.getoption("hotspan", default=None)
    if root is None:
        return
    _refuse_swallowed_path(config, root)
    config.pluginmanager.register(_Recorder(config, Path(root)), _PLUGIN_NAME)


def _refuse_swallowed_path(config: pytest.Config, root: str) -> None:
    """``pytest --hotspan tests/`` gives ``tests/`` to --hotspan, not to pytest: refuse a DIR
    given as a separate word that is a file or a directory of tests, rather than write spans
    into the test tree and run other tests than the ones meant."""
    args = list(config.invocation_params.args)
    separate = any(
        a == "--hotspan" and i + 1 < len(args) and args[i + 1] == root for i, a in enumerate(args)
    )
    if not separate:
        return
    path = Path(root)
    if path.is_file() or (
        path.is_dir()
        and (
            any(path.glob("test_*.py"))
            or any(path.glob("*_test.py"))
            or (path / "conftest.py").exists()
        )
    ):
        raise pytest.UsageError(
            f"--hotspan took {root!r} as its directory, which holds tests: write --hotspan={DEFAULT_DIR} (or "
            f"--hotspan=DIR) before the test paths, or put --hotspan after them"
        )


def _session_dir(root: Path) -> Path:
    """A new directory under ``root`` for this run: its start time (so a listing sorts runs in
    order), the pid and random bits; made here, so no other run can take it."""
    root.mkdir(parents=True, exist_ok=True)
    while True:
        path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{os.urandom(3).hex()}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


class _Recorder:
    """The per-test hooks, registered only with ``--hotspan``."""

    def __init__(self, config: pytest.Config, root: Path):
        from .recording import _hub as hub

        self.config = config
        try:
            self.directory = _session_dir(root)
        except OSError as exc:
            raise pytest.UsageError(
                f"--hotspan={root}: cannot make a session directory: {exc}"
            ) from None
        self._hub = hub
        self.reader = hub.attach("pytest --hotspan")
        self.token: str | None = None
        self.seq = 0
        self.parts = 0
        self.spans = 0
        self.dropped = 0
        self.errors: list[str] = []
        # The test under way: its tables so far, its outcome, the drop counts at its start.
        self._tables: list[pa.Table] = []
        self._outcome = "passed"
        self._dropped_at_start = (0, 0)

    # ------------------------------------------------------------------ counting

    def _drop_counts(self) -> tuple[int, int]:
        from . import _native

        return _native.dropped(), self.reader.dropped

    def _take(self) -> pa.Table | None:
        """The spans since the last take; None (said once) when the drain fails: the run
        goes on without them rather than fail over its spans."""
        try:
            return self.reader.take()
        except Exception as exc:  # noqa: BLE001
            if not self.errors:
                self._error(f"could not drain the spans: {type(exc).__name__}: {exc}")
            return None

    # ------------------------------------------------------------------ hooks

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        # What was recorded before this test (collection, the previous test's hooks) is not
        # this test's: taken and let go.
        self._take()
        self._tables = []
        self._outcome = "passed"
        self._dropped_at_start = self._drop_counts()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        from . import _machine

        self._tables.append(self._take())  # the setup's spans (fixtures)
        machine_at_start = _machine.snapshot()
        yield
        call = self._take()
        self._tables.append(call)
        benchmark = _benchmark_fixture(item)
        if benchmark is not None and call is not None:
            try:
                benchmark.extra_info[EXTRA_INFO_KEY] = summary(
                    call, dropped=self._dropped_now(), machine=_machine.measure(machine_at_start)
                )
            except Exception as exc:  # noqa: BLE001 - never fail a test over its spans
                self._error(
                    f"{item.nodeid}: could not summarise the spans: {type(exc).__name__}: {exc}"
                )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._outcome = "failed"
        elif report.skipped and self._outcome != "failed":
            self._outcome = "skipped"

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        # Written here, after the reports: the write is not counted in the test's durations.
        self._tables.append(self._take())
        tables, self._tables = [t for t in self._tables if t is not None and t.num_rows], []
        dropped = self._dropped_now()
        self.dropped += dropped
        if not tables:
            return
        try:
            self._write(tables, nodeid, dropped)
        except Exception as exc:  # noqa: BLE001 - never fail the run over its spans
            self._error(
                f"{nodeid}: could not write its spans to {self.directory}: {type(exc).__name__}: {exc}"
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        if self.parts:
            write(
                f"hotspan: {self.spans:,} spans of {self.parts} tests -> {self.directory}  "
                f"(hotspan stats {self.directory})"
            )
        else:
            write(f"hotspan: no test recorded a span (nothing written to {self.directory})")
        if self.dropped:
            write(
                f"hotspan: {self.dropped:,} spans lost (the recorder's memory cap was reached between two "
                f"drains; see hotspan.configure(memory_cap=))",
                yellow=True,
            )
        for message in self.errors:
            write(f"hotspan: {message}", red=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._hub.detach(self.reader)
        if not self.parts:
            try:
                self.directory.rmdir()  # empty and ours: no trace of a run that recorded nothing
            except OSError:
                pass

    # ------------------------------------------------------------------ helpers

    def _dropped_now(self) -> int:
        core, reader = self._drop_counts()
        return (core - self._dropped_at_start[0]) + (reader - self._dropped_at_start[1])

    def _write(self, tables: list[pa.Table], nodeid: str, dropped: int) -> None:
        import pyarrow as pa

        from ._api import rank as current_rank
        from .formats.dataset import new_token, write_part

        table = (
            tables[0]
            if len(tables) == 1
            else pa.concat_tables(
                [t.replace_schema_metadata(tables[-1].schema.metadata) for t in tables]
            ).unify_dictionaries()
        )
        if self.token is None:
            self.token = new_token()
        rank = table.column("rank")[0].as_py() if table.num_rows else current_rank()
        write_part(
            table,
            self.directory,
            rank=rank,
            pid=os.getpid(),
            seq=self.seq,
            token=self.token,
            part_meta={PART_TEST_KEY: nodeid, "outcome": self._outcome, "test_dropped": dropped},
        )
        self.seq += 1
        self.parts += 1
        self.spans += table.num_rows

    def _error(self, message: str) -> None:
        self.errors.append(message)
        print(f"hotspan: {message}", file=sys.stderr)


def _benchmark_fixture(item: pytest.Item) -> Any:
    """The test's pytest-benchmark fixture once it has run (``stats`` set), else None."""
    module = sys.modules.get("pytest_benchmark.fixture")
    if module is None:
        return None
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, module.BenchmarkFixture) and getattr(value, "stats", None) is not None:
            return value
    return None


def summary(
    table: pa.Table, *, dropped: int = 0, machine: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What goes into ``benchmark.extra_info["hotspan"]``: per category/name (largest total
    first) the count, p50, p99, total, mean and standard deviation of the durations in ns
    (``hotspan.stats``), and up to :data:`SPAN_SAMPLES` of the durations (``data_ns``: evenly
    spaced order statistics); the spans lost while the benchmark ran (``dropped``: its
    figures then leave them out); the machine's speed while it ran (``machine``)."""
    import numpy as np

    from .analysis import stats
    from .analysis.comparison import durations_by_group

    durations = durations_by_group(table, ("category", "name"))
    rows = []
    for row in stats(table, by=("category", "name")).to_pylist():
        values = np.sort(durations.get((row["category"], row["name"]), np.zeros(0, np.int64)))
        if len(values) > SPAN_SAMPLES:
            values = values[
                np.round(np.linspace(0, len(values) - 1, SPAN_SAMPLES)).astype(np.int64)
            ]
        everything = durations.get((row["category"], row["name"]))
        rows.append(
            {
                "category": row["category"],
                "name": row["name"],
                "count": row["count"],
                "p50_ns": row["p50_ns"],
                "p99_ns": row["p99_ns"],
                "total_ns": row["total_ns"],
                "mean_ns": row["mean_ns"],
                "stddev_ns": float(np.std(everything, ddof=1))
                if everything is not None and len(everything) > 1
                else 0.0,
                "data_ns": [int(v) for v in values],
            }
        )
    out: dict[str, Any] = {"spans": rows, "dropped": int(dropped)}
    if machine is not None:
        out["machine"] = machine
    return out
