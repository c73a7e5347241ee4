"""The across-ranks kernel (see :mod:`hotspan.analysis.ranks` for what it answers and how):
collectives matched across ranks, clocks aligned, waits and blame, the straggler test,
steps; over numpy columns gathered from Arrow batches (rank_source.py). rank_reasons.py
adds what needs a second pass over the spans."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .._collective_match import NONE, group_of, is_collective, match_instances
from .filters import SpanFilter
from ._rank_arrays import PerRank, group_bounds, sorted_by
from ._rank_source import RankSource, Strings, gather

__all__ = [
    "META_RANKS",
    "PerRank",
    "RankAnalysis",
    "RankOptions",
    "group_bounds",
    "group_of",
    "is_collective",
]

META_RANKS = b"hotspan.ranks"


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(map(str, ranks[:8]))
    return f"ranks {shown}" + (f" and {len(ranks) - 8:,} more" if len(ranks) > 8 else "")


@dataclass(frozen=True)
class RankOptions:
    """How the across-ranks questions are asked (see the module doc)."""

    category: str = "comms"
    step: str | None = "step"
    align: bool = True
    clock_error_ns: int | None = None
    alpha: float = 0.001
    min_share: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha: expected a number between 0 and 1, not {self.alpha!r}")
        if not 0 <= self.min_share < 1:
            raise ValueError(f"min_share: expected a number in [0, 1), not {self.min_share!r}")
        if not self.category:
            raise ValueError("category: expected the last part of the collectives' category")


def group_quantile(keys: np.ndarray, values: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct key (sorted): the lower ``q``-quantile of its values."""
    starts, counts = group_bounds(keys) if sorted_by(keys) else (None, None)
    if counts is not None and len(counts) and (counts == counts[0]).all():
        # every group the same size, rows grouped already (instances of all ranks): a matrix
        width = int(counts[0])
        k = int(np.floor(q * (width - 1)))
        matrix = values.reshape(len(counts), width)
        return keys[starts], np.partition(matrix, k, axis=1)[:, k]
    order = np.lexsort((values, keys))
    starts, counts = group_bounds(keys[order])
    picked = order[starts + np.floor(q * (counts - 1)).astype(np.int64)]
    return keys[order[starts]], values[picked]


def count_before(
    rank_a: np.ndarray, time_a: np.ndarray, rank_b: np.ndarray, time_b: np.ndarray, strict: bool
) -> tuple[np.ndarray, np.ndarray]:
    """For each b: the position, in the a's sorted by (rank, time), of the first a of its rank
    at or after (``strict``: after) its time (-1: no a of its rank); and that sorting order."""
    index = PerRank(rank_a, time_a)
    return index.position(rank_b, time_b, strict), index.order


class RankAnalysis:
    """The across-ranks kernel over ``spans`` (a table or paths): computed once, asked thrice."""

    def __init__(
        self,
        spans: Any,
        options: RankOptions | None = None,
        span_filter: SpanFilter | dict[str, Any] | None = None,
        engine: Any = None,
    ) -> None:
        self.options = options or RankOptions()
        #: what the second pass over the spans found (rank_reasons.second_pass)
        self.found: dict[str, Any] = {}
        # the engine's own source (Engine.rank_source): a table, Parquet parts, a Spark view
        if isinstance(spans, RankSource):
            self.source = spans
        else:
            from ._engine import rank_source

            self.source = rank_source(spans, span_filter, engine)
        self.strings = Strings()
        try:
            self._first_pass()
            self._match()
            self._steps()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Let the engine's resources go (a Spark view); the answers computed stay."""
        self.source.close()

    def __enter__(self) -> RankAnalysis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def collective_sql(self) -> str:
        """:meth:`_is_collective` as a Spark SQL condition (for the Spark engine's passes)."""
        from ._queries import SPARK

        want = self.options.category
        # comms.is_collective: the category's last part is ``want`` or ``want:GROUP``
        last = f"substring_index({SPARK.quote('category')}, '/', -1)"
        return (
            f"({last} = {SPARK.string(want)} OR "
            f"substr({last}, 1, {len(want) + 1}) = {SPARK.string(want + ':')})"
        )

    # -- pass 1: collectives and top-level spans ---------------------------------------------

    def _is_collective(self, category_codes: np.ndarray) -> np.ndarray:
        want = self.options.category
        flags = np.array([is_collective(v, want) for v in self.strings.values], bool)
        return np.asarray(flags[category_codes])

    def _first_pass(self) -> None:
        cols: tuple[str, ...] = ("rank", "name", "category", "start_ns", "end_ns", "thread_id")
        cols += ("span_id",)
        picks: dict[
            str, tuple[Callable[[dict[str, np.ndarray]], np.ndarray | None], tuple[str, ...]]
        ] = {
            "coll": (lambda b: self._is_collective(b["category"]), cols),
            "top": (lambda b: b["depth"] == 0, cols),
        }
        read: tuple[str, ...] = ("depth",)
        early = None
        if self.source.spark is None:
            # the windows' sums and the steps' children too, so that the spans are read once
            # (rank_reasons.EarlyWindows; checked, else a second pass reads them again)
            from ._rank_reasons import EarlyWindows

            early = EarlyWindows(self)
            picks["kids"] = (
                lambda b: (b["depth"] == 1) & ~self._is_collective(b["category"]),
                EarlyWindows.KID_COLUMNS,
            )
            read = ("depth", "rank", "name", "start_ns", "end_ns", "self_ns")
        # on Spark, Spark keeps the rows (collectives, top-level spans); the same code picks
        source = self.source.narrowed(
            f"{self.collective_sql()} OR depth = 0", (*cols[:-1], "depth", "span_id")
        )
        found = gather(source, self.strings, picks, read=read, visit=early.visit if early else None)
        self.coll, self.top = found["coll"], found["top"]
        if early is not None:
            early.kids = found["kids"]
            self.found["early"] = early

    # -- matching, clocks, waits -------------------------------------------------------------

    def _match(self) -> None:
        c = self.coll
        names, cats = c["name"].astype(np.int64), c["category"].astype(np.int64)
        rank = c["rank"].astype(np.int64)
        self.ranks = np.unique(np.concatenate([rank, self.top["rank"].astype(np.int64)]))
        n_ranks = len(self.ranks)
        want = self.options.category
        # the matching rule itself lives below the formats (the trace writers' flows use it)
        found = match_instances(names, cats, rank, c["start_ns"], self.strings.values, want)
        key, index, pairs, n_instances = found.key, found.index, found.pairs, found.n_instances
        self.groups = found.groups
        self.problems: list[dict[str, Any]] = []
        label = self._key_label(pairs)
        reported: set[int] = set()
        for d, seq, before, at in found.disagreements:
            by_name: dict[str, list[int]] = {}
            for r, n in zip(rank[at], names[at]):
                by_name.setdefault(str(self.strings.values[n]), []).append(int(r))
            group = self.groups[int(pairs[d, 1])]
            self.problems.append(
                {
                    "group": group,
                    "seq": seq,
                    "ranks_by_name": {n: sorted(rs) for n, rs in sorted(by_name.items())},
                    "left_out": before - seq,
                    "text": f"group {group}: ranks disagree at collective #{seq} ("
                    + "; ".join(f"{_ranks_text(rs)} in {n}" for n, rs in sorted(by_name.items()))
                    + f"): a rank skipped or added a collective; its {before - seq:,} "
                    "instances from there on are not matched",
                }
            )
            reported.add(d)
        most, holders = found.most, found.holders
        group_key = key[found.first_rows]
        for g in np.flatnonzero((most > n_instances) & (n_instances != NONE)):
            if int(g) in reported:
                continue
            mine = group_key == g
            short = found.counts[mine] == n_instances[g]
            behind = sorted(int(r) for r in rank[found.first_rows[mine]][short])
            self.problems.append(
                {
                    "key": label[g],
                    "seq": int(n_instances[g]),
                    "ranks_missing": behind,
                    "text": f"{label[g]}: {_ranks_text(behind)} ha{'s' if len(behind) == 1 else 've'} "
                    f"{int(n_instances[g]):,} instance{'s' if n_instances[g] != 1 else ''} where "
                    f"{'another rank has' if holders[g] - len(behind) == 1 else 'other ranks have'} "
                    f"up to {int(most[g]):,}: instances from #{int(n_instances[g])} on are not matched",
                }
            )
        keep, inst = found.instances()
        self.unmatched = int((~keep).sum())
        n_strings = len(self.strings.values) + 1
        # the rows of matched instances, by (instance, rank)
        self.row_of_span = np.full(len(key), -1, np.int64)
        rows = np.flatnonzero(keep)
        rows = rows[np.lexsort((rank[rows], inst[rows]))]
        self.row_of_span[rows] = np.arange(len(rows))
        # the key column's text: a name (with its category or group where one name has
        # several), per (key, name) met among the matched rows
        named, label_of = np.unique(key[rows] * n_strings + names[rows], return_inverse=True)
        label_of = label_of.reshape(-1)
        label_pairs = np.stack([named // n_strings, named % n_strings], 1).reshape(-1, 2)
        self.key_names = self._row_labels(pairs, label_pairs)
        m = {
            "span": rows,
            "instance": inst[rows],
            "key": key[rows],
            "label": label_of,
            "name": names[rows],
            "index": index[rows],
            "rank": rank[rows],
            "start": c["start_ns"][rows],
            "end": c["end_ns"][rows],
        }
        m["rank_idx"] = np.searchsorted(self.ranks, m["rank"])
        # clocks: each rank's offset from the median end of its instances
        offset = np.zeros(n_ranks, np.int64)
        spread = np.zeros(n_ranks, np.int64)
        inst_starts, inst_counts = group_bounds(m["instance"])
        if self.options.align and n_ranks > 1 and len(rows):
            _, median_end = group_quantile(m["instance"], m["end"], 0.5)
            residual = m["end"] - np.repeat(median_end, inst_counts)
            if (inst_counts == n_ranks).all():
                # every instance holds every rank, rows by (instance, rank): a matrix whose
                # columns are the ranks
                by_rank = residual.reshape(len(inst_counts), n_ranks)
                k = (len(inst_counts) - 1) // 2
                offset[:] = np.partition(by_rank, k, axis=0)[k]
                stray_m = np.abs(by_rank - offset[None, :])
                k = int(np.floor(0.95 * (len(inst_counts) - 1)))
                spread[:] = np.partition(stray_m, k, axis=0)[k]
            else:
                who, offs = group_quantile(m["rank_idx"], residual, 0.5)
                offset[who] = offs
                stray = np.abs(residual - offset[m["rank_idx"]])
                who, far = group_quantile(m["rank_idx"], stray, 0.95)
                spread[who] = far
        error = self.options.clock_error_ns
        self.offset = offset
        if error is None:
            # the calibration's bound, and per rank a collector's offset uncertainty
            by_rank = self.source.rank_clock_errors()
            measured = np.array([by_rank.get(int(r), 0) for r in self.ranks], np.int64)
            self.error = spread + self.source.clock_error_ns() + measured
        else:
            self.error = spread + int(error)
        arrival = m["start"] - offset[m["rank_idx"]]
        m["arrival"] = arrival
        # the last arrival of each instance and who made it
        by_arrival = np.lexsort((arrival, m["instance"]))
        last_row = by_arrival[inst_starts + inst_counts - 1]
        latest = arrival[last_row]
        second = np.where(
            inst_counts > 1,
            arrival[by_arrival[inst_starts + np.maximum(inst_counts - 2, 0)]],
            latest,
        )
        wait = np.clip(np.repeat(latest, inst_counts) - arrival, 0, m["end"] - m["start"])
        m["wait"] = wait
        m["last"] = np.zeros(len(rows), bool)
        m["last"][last_row] = True
        self.m = m
        self.inst = {
            "start": inst_starts,
            "count": inst_counts,
            "last_row": last_row,
            "latest": latest,
            "lead": latest - second,
            "blame": np.add.reduceat(wait, inst_starts) if len(rows) else np.zeros(0, np.int64),
        }

    def _key_label(self, pairs: np.ndarray) -> list[str]:
        """Per match key, for messages: ``group G``, or the name (``category:name`` where the
        name has several collective categories)."""
        values = self.strings.values
        plain = pairs[pairs[:, 0] == 0]
        per_name = np.bincount(plain[:, 1]) if len(plain) else np.zeros(0, np.int64)
        out = []
        for grouped, a, b in pairs:
            if grouped:
                out.append(f"group {self.groups[int(a)]}")
            else:
                out.append(str(values[a]) if per_name[a] == 1 else f"{values[b]}:{values[a]}")
        return out

    def _row_labels(self, pairs: np.ndarray, label_pairs: np.ndarray) -> list[str]:
        """The ``key`` column's text per (match key, name): the name, with ``@group`` where
        the run has several groups, or ``category:`` before it where one name has several
        collective categories outside groups."""
        values = self.strings.values
        plain = pairs[pairs[:, 0] == 0]
        per_name = np.bincount(plain[:, 1]) if len(plain) else np.zeros(0, np.int64)
        out = []
        for k, name in label_pairs:
            grouped, a, b = pairs[k]
            if grouped:
                text = str(values[name])
                out.append(text if len(self.groups) == 1 else f"{text}@{self.groups[int(a)]}")
            else:
                out.append(str(values[a]) if per_name[a] == 1 else f"{values[b]}:{values[a]}")
        return out

    # -- steps -------------------------------------------------------------------------------

    def _steps(self) -> None:
        t = self.top
        want = self.options.step
        code = self.strings.find(want) if want else None
        if code is not None and (t["name"] == code).any():
            mask = t["name"] == code
        elif len(t["rank"]):
            # each rank's most frequent top-level span
            rank_idx = np.searchsorted(self.ranks, t["rank"])
            n_names = len(self.strings.values)
            counts = np.bincount(
                rank_idx * n_names + t["name"], minlength=len(self.ranks) * n_names
            )
            best = counts.reshape(len(self.ranks), n_names).argmax(axis=1)
            mask = t["name"] == best[rank_idx]
        else:
            mask = np.zeros(0, bool)
        order = np.flatnonzero(mask)
        order = order[np.lexsort((t["start_ns"][order], t["rank"][order]))]
        s = {k: v[order] for k, v in t.items()}
        starts, counts = group_bounds(s["rank"])
        s["step"] = np.arange(len(order)) - np.repeat(starts, counts)
        s["rank_idx"] = np.searchsorted(self.ranks, s["rank"])
        self.steps = s
        self.n_steps = int(counts.max(initial=0))
        durations = s["end_ns"] - s["start_ns"]
        self.step_ns = float(durations.mean()) if len(durations) else math.nan
        # each collective row's step: the step of its rank that holds its arrival
        m = self.m
        pos, by_rank = count_before(s["rank"], s["start_ns"], m["rank"], m["start"], strict=True)
        pos = pos - 1
        inside = (pos >= 0) & (pos < len(order))
        inside[inside] &= s["rank"][by_rank[pos[inside]]] == m["rank"][inside]
        inside[inside] &= s["end_ns"][by_rank[pos[inside]]] >= m["start"][inside]
        m["step"] = np.where(
            inside, s["step"][by_rank[np.where(inside, pos, 0)]] if len(order) else -1, -1
        )

    # -- answers -----------------------------------------------------------------------------

    def _meta(self, **more: Any) -> dict[bytes, bytes]:
        info = {
            "ranks": len(self.ranks),
            "steps": self.n_steps,
            "step_ns": None if math.isnan(self.step_ns) else self.step_ns,
            "instances": len(self.inst["start"]),
            "unmatched": self.unmatched,
            "groups": self.groups,
            "match_problems": self.problems,
            "clock_offset_ns": {int(r): int(o) for r, o in zip(self.ranks, self.offset)},
            "arrival_error_ns": {int(r): int(e) for r, e in zip(self.ranks, self.error)},
            **more,
        }
        return {META_RANKS: json.dumps(info).encode()}

    def collectives(self) -> pa.Table:
        m = self.m
        keys = pa.array(m["label"].astype(np.int32))
        table = pa.table(
            {
                "key": pa.array(self.key_names, pa.string()).take(keys),
                "index": pa.array(m["index"]),
                "rank": pa.array(m["rank"].astype(np.int32)),
                "arrival_ns": pa.array(m["arrival"]),
                "arrival_error_ns": pa.array(
                    self.error[m["rank_idx"]] if len(m["rank"]) else np.zeros(0, np.int64)
                ),
                "wait_ns": pa.array(m["wait"]),
                "last": pa.array(m["last"]),
            }
        )
        return table.replace_schema_metadata(self._meta())

    def blame(self) -> tuple[np.ndarray, np.ndarray]:
        """Per rank (``self.ranks`` order): blame and wait, in ns."""
        n = len(self.ranks)
        who = self.m["rank_idx"][self.inst["last_row"]]
        blame = np.bincount(who, weights=self.inst["blame"], minlength=n).astype(np.int64)
        wait = np.bincount(self.m["rank_idx"], weights=self.m["wait"], minlength=n).astype(np.int64)
        return blame, wait

    def straggler_test(self, blame: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per rank: the Bennett bound on the chance of a blame this high were ranks alike,
        the expected blame, and whether it is a straggler (module doc). Step-down: once
        stragglers are named, the instances they arrived last at are set aside and the
        others are tested again on the rest, so that one rank late by a second does not
        hide another late by a millisecond."""
        n = len(self.ranks)
        named = np.zeros(n, bool)
        p, mean = np.ones(n), np.zeros(n)
        culprit = self.m["rank_idx"][self.inst["last_row"]]
        while True:
            p_now, mean_now, new = self._bennett(blame, named, culprit)
            untested = ~named
            p[untested], mean[untested] = p_now[untested], mean_now[untested]
            if not new.any():
                return p, mean, named
            named |= new

    def _bennett(
        self, blame: np.ndarray, named: np.ndarray, culprit: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One round of the test over the instances whose last arriver is not ``named``;
        each one's last arriver taken as uniform over its group's ranks not named."""
        n = len(self.ranks)
        keep = ~named[culprit]
        counts = self.inst["count"]
        b_k = np.where(keep, self.inst["blame"], 0).astype(np.float64)
        member = self.m["rank_idx"]
        named_in = (
            np.add.reduceat(named[member].astype(np.int64), self.inst["start"])
            if len(member)
            else counts
        )
        size = np.maximum(counts - named_in, 1).astype(np.float64)
        per_row_b = np.repeat(b_k, counts)
        per_row_n = np.repeat(size, counts)
        free = ~named[member]
        mean = np.bincount(member[free], weights=(per_row_b / per_row_n)[free], minlength=n)
        var = np.bincount(
            member[free],
            weights=(per_row_b**2 * (1 / per_row_n) * (1 - 1 / per_row_n))[free],
            minlength=n,
        )
        bound = float(b_k.max(initial=0.0))
        total = float(b_k.sum())
        p = np.ones(n)
        excess = np.where(named, 0, blame) - mean
        ok = (excess > 0) & (var > 0) & (bound > 0) & ~named
        u = bound * excess[ok] / var[ok]
        h = (1 + u) * np.log1p(u) - u
        p[ok] = np.exp(-(var[ok] / bound**2) * h)
        share_over = excess / total if total > 0 else np.zeros(n)
        new = (
            ~named & (p <= self.options.alpha / max(n, 1)) & (share_over >= self.options.min_share)
        )
        return p, mean, new

    def if_median(self) -> np.ndarray:
        """Per rank: the mean step time had the rank, where it arrived last, arrived with the
        second last (as the median rank would have: the collective then starts that much sooner)."""
        n = len(self.ranks)
        who = self.m["rank_idx"][self.inst["last_row"]]
        saved = np.bincount(who, weights=self.inst["lead"], minlength=n)
        if not self.n_steps or math.isnan(self.step_ns):
            return np.full(n, math.nan)
        return self.step_ns - saved / self.n_steps

    def step_cells(self) -> pa.Table:
        """A row per (rank, step) the rank has, in (rank, step) order: the step span's
        ``start_ns``/``end_ns`` (the rank's own clock) and ``step_ns``; ``wait_ns``, the rank's
        waits in the collectives it arrived at inside that step; ``blame_ns``, the others'
        waits in the instances it arrived last at inside that step; ``last``, how many
        those were. Each collective counts in the step of its rank that holds its arrival
        (none: in no cell), so a column sums to at most :meth:`blame`'s."""
        s, m = self.steps, self.m
        n = len(s["rank"])
        # rows of s are by (rank, step): a (rank, step) pair's row is its rank's first + step
        first = np.searchsorted(s["rank_idx"], m["rank_idx"]) if n else m["rank_idx"] * 0
        cell = np.where(m["step"] >= 0, first + m["step"], -1)
        inside = cell >= 0
        wait = np.zeros(n, np.int64)  # integer sums: exact at any size
        np.add.at(wait, cell[inside], m["wait"][inside])
        last_cell = cell[self.inst["last_row"]]
        blamed = last_cell >= 0
        blame = np.zeros(n, np.int64)
        np.add.at(blame, last_cell[blamed], self.inst["blame"][blamed])
        last = np.bincount(last_cell[blamed], minlength=n)
        table = pa.table(
            {
                "rank": pa.array(s["rank"].astype(np.int32)),
                "step": pa.array(s["step"].astype(np.int64)),
                "start_ns": pa.array(s["start_ns"].astype(np.int64)),
                "end_ns": pa.array(s["end_ns"].astype(np.int64)),
                "step_ns": pa.array((s["end_ns"] - s["start_ns"]).astype(np.int64)),
                "wait_ns": pa.array(wait),
                "blame_ns": pa.array(blame),
                "last": pa.array(last[:n].astype(np.int32)),
            }
        )
        return table.replace_schema_metadata(self._meta())

    def steps_last(self) -> np.ndarray:
        n = len(self.ranks)
        rows = self.inst["last_row"]
        who, step = self.m["rank_idx"][rows], self.m["step"][rows]
        pairs = np.unique(np.stack([who[step >= 0], step[step >= 0]], 1), axis=0)
        return np.bincount(pairs[:, 0], minlength=n) if len(pairs) else np.zeros(n, np.int64)
