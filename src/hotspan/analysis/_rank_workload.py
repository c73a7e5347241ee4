"""A generated many-rank training run with known answers, for the tests and benchmarks of
:mod:`hotspan.analysis.ranks` (``hotspan.testing.many_ranks`` is the name they use).

Each rank runs ``steps`` steps; a step (``step``, category ``train``) holds, one after
another on the rank's main thread::

    data.fetch (train/data)  forward (train/compute)  backward (train/compute)
    all_reduce (train/comms) optimizer (train/compute) all_gather (train/comms)  log (train)

``forward`` and ``backward`` hold ``layers`` children each (``layer``, ``train/compute/layer``)
when asked, to reach a benchmark's span count. A collective ends on every rank at the same
true time (its last arrival plus its transfer, plus an exit jitter of at most
``exit_jitter_ns``), so a rank that arrives early waits. Stragglers add time to one span
on one rank in chosen steps; each host (``ranks_per_host`` ranks) records on a clock offset
from true time by half to all of ``clock_offset_ns`` (the first host's is 0). The answers
(true waits, last arrivers, the critical path) are kept beside the spans, in each rank's
recorded clock where they are times.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["RanksRun", "Straggler", "many_ranks"]

# (name, category, mean ns, is a collective); the step is the parent of all of them.
CHILDREN: tuple[tuple[str, str, int, bool], ...] = (
    ("data.fetch", "train/data", 2_000_000, False),
    ("forward", "train/compute", 5_000_000, False),
    ("backward", "train/compute", 8_000_000, False),
    ("all_reduce", "train/comms", 1_000_000, True),
    ("optimizer", "train/compute", 1_000_000, False),
    ("all_gather", "train/comms", 500_000, True),
    ("log", "train", 50_000, False),
)
NAMES = [c[0] for c in CHILDREN]
COLLECTIVE_CHILDREN = [j for j, c in enumerate(CHILDREN) if c[3]]
T0_NS = 1_800_000_000_000_000_000


@dataclass(frozen=True)
class Straggler:
    """``rank`` spends ``extra_ns`` more in ``span`` in ``steps`` (a list of step indices, or
    the fraction of the steps it is slow in, drawn at random)."""

    rank: int
    span: str = "data.fetch"
    extra_ns: int = 20_000_000
    steps: Sequence[int] | float = 1.0


@dataclass
class RanksRun:
    """A generated run and its known answers (times in each rank's recorded clock)."""

    n_ranks: int
    n_steps: int
    layers: int
    stragglers: tuple[Straggler, ...]
    #: {rank: sorted step indices in which it was made slow}
    slow_steps: dict[int, np.ndarray]
    #: per rank, the offset its host's clock adds to true time
    clock_offset_ns: np.ndarray
    #: [steps, ranks, len(CHILDREN)] recorded start and end of each child; [steps, ranks] of the step
    start_ns: np.ndarray
    end_ns: np.ndarray
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    #: [steps, collectives per step, ranks]: each rank's true wait; [steps, collectives]: the last rank
    wait_ns: np.ndarray
    last_rank: np.ndarray
    seed: int
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def injected(self) -> set[int]:
        """The ranks made slow."""
        return {s.rank for s in self.stragglers}

    @property
    def total_wait_ns(self) -> int:
        return int(self.wait_ns.sum())

    def critical_path(self) -> list[tuple[int, int, str, int, int]]:
        """(step, rank, name, start_ns, end_ns) rows: per step, the last arriver's spans
        before each collective, the collective from its last arrival to its end on that rank,
        and the tail of the rank whose step ends last."""
        rows = []
        true_end = self.step_end_ns - self.clock_offset_ns[None, :]
        for s in range(self.n_steps):
            prev = 0  # children before the first collective
            for c, j in enumerate(COLLECTIVE_CHILDREN):
                r = int(self.last_rank[s, c])
                for k in range(prev, j):
                    rows.append(
                        (s, r, NAMES[k], int(self.start_ns[s, r, k]), int(self.end_ns[s, r, k]))
                    )
                rows.append(
                    (s, r, NAMES[j], int(self.start_ns[s, r, j]), int(self.end_ns[s, r, j]))
                )
                prev = j + 1
            r = int(np.argmax(true_end[s]))
            for k in range(prev, len(CHILDREN)):
                rows.append(
                    (s, r, NAMES[k], int(self.start_ns[s, r, k]), int(self.end_ns[s, r, k]))
                )
        return rows

    def table(self, ranks: Sequence[int] | None = None) -> pa.Table:
        """The spans of ``ranks`` (all by default) as a span table."""
        ranks = range(self.n_ranks) if ranks is None else ranks
        tables = [self._rank_table(r) for r in ranks]
        return pa.concat_tables(tables).unify_dictionaries() if tables else self._rank_table(0)[:0]

    def write(self, directory: str | os.PathLike[str]) -> Path:
        """The run as a run directory (one part per rank, ``part-r<R>-...parquet``)."""
        import pyarrow.parquet as pq

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for r in range(self.n_ranks):
            pq.write_table(
                self._rank_table(r),
                out / f"part-r{r}-{40_000 + r}-{self.seed:08x}{r:08x}-0.parquet",
            )
        return out

    def _rank_table(self, r: int) -> pa.Table:
        from .._schema import META_RUN, SPAN_SCHEMA

        steps, n_children, layers = self.n_steps, len(CHILDREN), self.layers
        # rows per step: the step, its children, then the layers of forward and backward
        per_step = 1 + n_children + 2 * layers
        start = np.empty((steps, per_step), np.int64)
        end = np.empty((steps, per_step), np.int64)
        start[:, 0], end[:, 0] = self.step_start_ns[:, r], self.step_end_ns[:, r]
        start[:, 1 : 1 + n_children] = self.start_ns[:, r, :]
        end[:, 1 : 1 + n_children] = self.end_ns[:, r, :]
        name_code = np.concatenate(
            ([0], np.arange(1, 1 + n_children), np.full(2 * layers, n_children + 1))
        )
        depth = np.concatenate(([0], np.ones(n_children, np.int32), np.full(2 * layers, 2))).astype(
            np.int32
        )
        parent_col = np.concatenate(([-1], np.zeros(n_children, np.int64)))
        self_ns = end - start
        if layers:
            parents: list[np.ndarray] = []
            for j in (NAMES.index("forward"), NAMES.index("backward")):
                s, e = start[:, 1 + j], end[:, 1 + j]
                edges = s[:, None] + ((e - s)[:, None] * np.arange(layers + 1)[None, :]) // layers
                col = 1 + n_children + len(parents) * layers
                start[:, col : col + layers] = edges[:, :-1] + 100
                end[:, col : col + layers] = edges[:, 1:]
                self_ns[:, col : col + layers] = (
                    end[:, col : col + layers] - start[:, col : col + layers]
                )
                self_ns[:, 1 + j] -= self_ns[:, col : col + layers].sum(axis=1)
                parents.append(np.full(layers, 1 + j))
            parent_col = np.concatenate((parent_col, *parents))
        self_ns[:, 0] -= (end[:, 1 : 1 + n_children] - start[:, 1 : 1 + n_children]).sum(axis=1)
        base = (r + 1) << 40
        ids = base + np.arange(steps * per_step, dtype=np.int64).reshape(steps, per_step)
        parent_ids = np.where(parent_col[None, :] >= 0, ids[:, np.maximum(parent_col, 0)], 0)
        n = steps * per_step
        names = pa.array(["step", *NAMES, "layer"])
        categories = pa.array(["train", *(c[1] for c in CHILDREN), "train/compute/layer"])
        codes = pa.array(np.tile(name_code, steps).astype(np.int32))
        has_parent = np.tile(parent_col >= 0, steps)
        columns = {
            "span_id": pa.array(ids.ravel().astype(np.uint64)),
            "parent_id": pa.array(parent_ids.ravel().astype(np.uint64), mask=~has_parent),
            "name": pa.DictionaryArray.from_arrays(codes, names),
            "category": pa.DictionaryArray.from_arrays(codes, categories),
            "start_ns": pa.array(start.ravel()),
            "end_ns": pa.array(end.ravel()),
            "duration_ns": pa.array((end - start).ravel()),
            "depth": pa.array(np.tile(depth, steps)),
            "thread_id": pa.array(np.full(n, 1000 + r, np.int64)),
            "thread_name": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, np.int32)), pa.array(["MainThread"])
            ),
            "pid": pa.array(np.full(n, 40_000 + r, np.int64)),
            "rank": pa.array(np.full(n, r, np.int32)),
            "arg": pa.nulls(n, pa.int64()),
            "error": pa.array(np.zeros(n, bool)),
            "self_ns": pa.array(self_ns.ravel()),
            "wait_ns": pa.array(np.zeros(self_ns.size, np.int64)),  # no asyncio task waits
        }
        schema = SPAN_SCHEMA.with_metadata({META_RUN: f"ranks-{self.seed}".encode()})
        return pa.Table.from_pydict(columns, schema=schema)


def many_ranks(
    ranks: int = 8,
    steps: int = 100,
    stragglers: Sequence[Straggler] = (),
    *,
    seed: int = 0,
    ranks_per_host: int = 4,
    clock_offset_ns: int = 500_000,
    jitter: float = 0.05,
    exit_jitter_ns: int = 500,
    layers: int = 0,
) -> RanksRun:
    """Simulate ``ranks`` ranks for ``steps`` steps (see the module doc); ``jitter``: the
    sigma of each span's log-normal duration."""
    rng = np.random.default_rng(seed)
    n_children = len(CHILDREN)
    n_hosts = -(-ranks // ranks_per_host)
    # every host but the first is off by half to all of clock_offset_ns, either way
    sign = rng.choice(np.array([-1, 1]), n_hosts)
    offsets_host = (sign * rng.uniform(0.5, 1.0, n_hosts) * clock_offset_ns).astype(np.int64)
    offsets_host[0] = 0
    offset = np.repeat(offsets_host, ranks_per_host)[:ranks].astype(np.int64)
    extra = np.zeros((steps, ranks, n_children), np.int64)
    slow_steps: dict[int, np.ndarray] = {}
    for slow in stragglers:
        if isinstance(slow.steps, (int, float)):
            chosen = np.flatnonzero(rng.random(steps) < float(slow.steps))
        else:
            chosen = np.asarray(sorted(slow.steps), np.int64)
        extra[chosen, slow.rank, NAMES.index(slow.span)] += slow.extra_ns
        slow_steps[slow.rank] = np.union1d(slow_steps.get(slow.rank, np.zeros(0, np.int64)), chosen)
    means = np.array([c[2] for c in CHILDREN], np.float64)
    durations = rng.lognormal(np.log(means) - jitter**2 / 2, jitter, (steps, ranks, n_children))
    durations_ns = durations.astype(np.int64) + extra
    gaps = rng.integers(2_000, 20_000, (steps, ranks, n_children + 1))
    exit_jitter = rng.integers(0, exit_jitter_ns + 1, (steps, len(COLLECTIVE_CHILDREN), ranks))
    start = np.empty((steps, ranks, n_children), np.int64)
    end = np.empty_like(start)
    step_start = np.empty((steps, ranks), np.int64)
    step_end = np.empty_like(step_start)
    wait = np.zeros((steps, len(COLLECTIVE_CHILDREN), ranks), np.int64)
    last = np.zeros((steps, len(COLLECTIVE_CHILDREN)), np.int64)
    t = T0_NS + rng.integers(0, 1_000, ranks).astype(np.int64)  # true time, per rank
    for s in range(steps):
        step_start[s] = t
        c = 0
        for j in range(n_children):
            arrive = t + gaps[s, :, j]
            start[s, :, j] = arrive
            if CHILDREN[j][3]:
                latest = arrive.max()
                last[s, c] = int(np.argmax(arrive))
                wait[s, c] = latest - arrive
                end[s, :, j] = latest + durations_ns[s, :, j].min() + exit_jitter[s, c]
                c += 1
            else:
                end[s, :, j] = arrive + durations_ns[s, :, j]
            t = end[s, :, j]
        step_end[s] = t + gaps[s, :, n_children]
        t = step_end[s] + 1_000
    shift = offset[None, :]
    return RanksRun(
        n_ranks=ranks,
        n_steps=steps,
        layers=layers,
        stragglers=tuple(stragglers),
        slow_steps=slow_steps,
        clock_offset_ns=offset,
        start_ns=start + shift[..., None],
        end_ns=end + shift[..., None],
        step_start_ns=step_start + shift,
        step_end_ns=step_end + shift,
        wait_ns=wait,
        last_rank=last,
        seed=seed,
    )
