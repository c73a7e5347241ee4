"""What the across-ranks kernel (ranks.py) answers from a second pass over the spans: why a
straggler arrives late (its spans since its previous collective against the median rank's)
and the critical path of each step."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .._units import human_ns
from ._rank_arrays import PerRank, group_bounds, sorted_by

if TYPE_CHECKING:
    from ._rank_kernel import RankAnalysis

__all__ = [
    "EarlyWindows",
    "N_NAMES",
    "UNTRACKED",
    "critical_path_table",
    "critical_summary",
    "second_pass",
    "straggler_table",
    "wanted_windows",
]

UNTRACKED = "(untracked)"


def _windows(analysis: RankAnalysis) -> dict[str, np.ndarray]:
    """Every collective span of each rank in start order, with the end of the one before it
    on that rank (the start of the window in which the rank worked towards it)."""
    if "windows" in analysis.found:
        windows: dict[str, np.ndarray] = analysis.found["windows"]
        return windows
    c = analysis.coll
    order = np.lexsort((c["start_ns"], c["rank"]))
    rank = c["rank"][order]
    prev_end = np.r_[np.iinfo(np.int64).min, c["end_ns"][order][:-1]]
    first = np.r_[True, rank[1:] != rank[:-1]] if len(rank) else np.zeros(0, bool)
    prev_end[first] = np.iinfo(np.int64).min
    found = {"order": order, "rank": rank, "start": c["start_ns"][order], "prev_end": prev_end}
    analysis.found["windows"] = found
    return found


def wanted_windows(analysis: RankAnalysis, flagged: np.ndarray) -> np.ndarray:
    """The collective spans (a mask over ``analysis.coll``) of every rank in the instances
    whose last arriver is ``flagged``: the windows the reasons compare."""
    m, inst = analysis.m, analysis.inst
    culprit = m["rank_idx"][inst["last_row"]]
    row_interest = np.repeat(np.isin(culprit, np.flatnonzero(flagged)), inst["count"])
    wanted = np.zeros(len(analysis.coll["rank"]), bool)
    wanted[m["span"][row_interest]] = True
    return wanted


def second_pass(analysis: RankAnalysis, wanted: np.ndarray | None, kids: bool) -> None:
    """One more reading of the spans, a batch at a time: with ``wanted`` (a mask over the
    collective spans), the self time per (wanted collective span, name) of the
    non-collective spans between that span's rank's previous collective and it; with
    ``kids``, the step spans' non-collective children. Kept in ``analysis.found``."""
    w = _windows(analysis)
    wanted_sorted = wanted[w["order"]] if wanted is not None else None
    index = PerRank(w["rank"], w["start"])  # w is sorted by (rank, start) already
    step_ids = np.sort(analysis.steps["span_id"].astype(np.uint64))
    n_names = N_NAMES
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    kid_cols = ("rank", "name", "start_ns", "end_ns", "parent_id")
    found_kids: dict[str, list[np.ndarray]] = {c: [] for c in kid_cols}
    source = analysis.source
    early = analysis.found.get("early")
    from_early = False
    if early is not None and kids:
        # the first pass kept the steps' candidate children (EarlyWindows): no second reading
        found_kids_early = early.step_children(step_ids)
        if found_kids_early is not None:
            analysis.found["kids"] = _index_kids(analysis, found_kids_early)
            kids = False
    if early is not None and wanted_sorted is not None:
        found_sums = early.window_sums(analysis, w, index)
        if found_sums is not None:
            for keys, sums in found_sums:
                chosen = wanted_sorted[keys // N_NAMES]
                parts.append((keys[chosen], sums[chosen]))
            wanted_sorted, from_early = None, True
    if source.spark is not None:
        # Spark sums the windows (the heavy group-by) and keeps the depth-1 spans; the loop
        # below picks the steps' children among those, as it does from every span
        if wanted_sorted is not None:
            parts.append(_spark_window_sums(analysis, w, index, wanted_sorted, n_names))
            wanted_sorted = None
        if kids:
            source = source.narrowed(
                f"depth = 1 AND NOT coalesce({analysis.collective_sql()}, false)",
                ("category", "name", "rank", "start_ns", "end_ns", "parent_id", "depth"),
            )
    columns = ["category", "name", "rank", "start_ns", "end_ns"]
    columns += ["self_ns"] if wanted_sorted is not None else []
    columns += ["parent_id", "depth"] if kids else []
    for table in source.batches(tuple(columns)) if kids or wanted_sorted is not None else ():
        if not table.num_rows:
            continue
        keep = ~analysis._is_collective(analysis.strings.codes(table.column("category")))
        names_all = analysis.strings.codes(table.column("name"))
        rank = table.column("rank").to_numpy()
        start = table.column("start_ns").to_numpy()
        end = table.column("end_ns").to_numpy()
        if kids and len(step_ids):
            # a step is a top-level span: its children are at depth 1
            hit = keep & (table.column("depth").to_numpy() == 1)
            parent = np.zeros(len(hit), np.uint64)
            if hit.any():
                parent[hit] = (
                    table.column("parent_id").filter(pa.array(hit)).fill_null(0).to_numpy()
                )
                at = np.minimum(np.searchsorted(step_ids, parent[hit]), len(step_ids) - 1)
                hit[hit] = step_ids[at] == parent[hit]
            for c, values in zip(kid_cols, (rank, names_all, start, end, parent)):
                found_kids[c].append(values[hit])
        if wanted_sorted is None:
            continue
        pos = index.position(rank, end, strict=False)
        ok = keep & (pos >= 0) & (pos < len(w["rank"]))
        ok[ok] &= w["rank"][pos[ok]] == rank[ok]
        ok[ok] &= w["prev_end"][pos[ok]] <= start[ok]
        ok[ok] &= wanted_sorted[pos[ok]]
        if not ok.any():
            continue
        self_ns = table.column("self_ns").to_numpy()[ok]
        parts.append(_sum_by_window(pos[ok], names_all[ok], self_ns))
    if kids:
        analysis.found["kids"] = _index_kids(
            analysis,
            {
                c: np.concatenate(v)
                if v
                else np.zeros(0, np.uint64 if c == "parent_id" else np.int64)
                for c, v in found_kids.items()
            },
        )
    if wanted is None:
        return
    if not parts:
        empty = np.zeros(0, np.int64)
        analysis.found["sums"] = (empty, empty, np.zeros(0))
        return
    uniq, sums = _merge_sums(parts, disjoint=from_early)
    analysis.found["sums"] = (w["order"][uniq // n_names], uniq % n_names, sums)


def _merge_sums(
    parts: list[tuple[np.ndarray, np.ndarray]], disjoint: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(key, sum) parts as one: each key once, its sums added. Parts whose keys rise already
    (windows summed a rank at a time, in order), or ``disjoint`` ones (each key in one part,
    once), are merged without a sort of them all."""
    keys = np.concatenate([u for u, _ in parts])
    sums = np.concatenate([v for _, v in parts])
    del parts[:]
    if disjoint or len(keys) < 2 or (keys[1:] > keys[:-1]).all():
        return keys, sums
    uniq, inverse = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(inverse, weights=sums)


N_NAMES = 1 << 20  # window keys: window position * N_NAMES + name code


def _sum_by_window(
    at_pos: np.ndarray, names: np.ndarray, self_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(window * N_NAMES + name, summed self time) of spans at window ``at_pos``."""
    at_pos, names = at_pos.astype(np.int64), names.astype(np.int64)
    if not len(at_pos):
        return np.zeros(0, np.int64), np.zeros(0)
    low, span = int(at_pos.min()), int(at_pos.max() - at_pos.min() + 1)
    n_seen = int(names.max()) + 1
    if span * n_seen <= 4 * len(at_pos) + 4096:
        # a batch holds a few ranks' spans in order: their windows are a short range
        sums = np.bincount(
            (at_pos - low) * n_seen + names, weights=self_ns, minlength=span * n_seen
        )
        nz = np.flatnonzero(sums)
        return (nz // n_seen + low) * N_NAMES + nz % n_seen, sums[nz]
    uniq, inverse = np.unique(at_pos * N_NAMES + names, return_inverse=True)
    return uniq, np.bincount(inverse, weights=self_ns)


class EarlyWindows:
    """second_pass's answers found during the first pass, so that a run is read once: each
    batch's spans are summed per window between that batch's own consecutive collectives of
    a rank (and name); the spans before a rank's first collective in the batch or after its
    last are kept as they are (few, where a batch holds a rank's spans in order); the steps'
    candidate children (depth 1, not collectives) are kept by the first pass's gather.
    :meth:`window_sums` checks that every pair of collectives consecutive in a batch is
    consecutive in the whole run (then each window summed in a batch is the run's window)
    and places the kept spans by the same rule as second_pass; when a check fails, or too
    many spans had to be kept, it answers None and second_pass reads the spans again.
    :meth:`step_children` needs no check (a span's parent is its parent in any batch)."""

    RAW_LIMIT = 1 << 22
    KID_COLUMNS = ("rank", "name", "start_ns", "end_ns", "parent_id")

    def __init__(self, analysis: RankAnalysis) -> None:
        self.analysis = analysis
        self.ok = True
        self.sums: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.raw: list[tuple[np.ndarray, ...]] = []
        self.n_raw = 0
        self.kids: dict[str, np.ndarray] | None = None

    def visit(self, seen: dict[str, np.ndarray]) -> None:
        if not self.ok:
            return
        coll = self.analysis._is_collective(seen["category"])
        rank, start, end = seen["rank"].astype(np.int64), seen["start_ns"], seen["end_ns"]
        names, self_ns = seen["name"], seen["self_ns"]
        c = np.flatnonzero(coll)
        nc = ~coll
        r, st, en = rank[nc], start[nc], end[nc]
        inside = np.zeros(len(r), bool)
        if len(c):
            index = PerRank(rank[c], start[c])
            c_rank, c_start, c_end = index.rank, index.time, end[c][index.order]
            same = c_rank[1:] == c_rank[:-1]
            if same.any():
                self.pairs.append((c_rank[1:][same], c_start[:-1][same], c_start[1:][same]))
            pos = index.position(r, en, strict=False)
            inside = (pos > 0) & (pos < len(c_rank))
            inside[inside] &= (c_rank[pos[inside]] == r[inside]) & (
                c_rank[pos[inside] - 1] == r[inside]
            )
            counted = inside.copy()
            counted[inside] &= c_end[pos[inside] - 1] <= st[inside]
            keys, sums = _sum_by_window(pos[counted], names[nc][counted], self_ns[nc][counted])
            at = keys // N_NAMES
            self.sums.append(
                (c_rank[at].astype(np.int32), c_start[at], (keys % N_NAMES).astype(np.int32), sums)
            )
        raw = ~inside
        self.n_raw += int(raw.sum())
        if self.n_raw > self.RAW_LIMIT:
            self.ok = False
            self.sums, self.pairs, self.raw = [], [], []
            return
        self.raw.append((r[raw], names[nc][raw], st[raw], en[raw], self_ns[nc][raw]))

    def window_sums(
        self, analysis: RankAnalysis, w: dict[str, np.ndarray], index: PerRank
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """(window key, self time) parts over every window, disjoint, each key once in its
        part; None when a batch's pair of collectives is not consecutive in the run, or too
        many spans had to be kept (then the spans are read again)."""
        if not self.ok:
            return None
        if "early_sums" not in analysis.found:
            for r, a, b in self.pairs:
                pa_, pb = index.position(r, a, strict=False), index.position(r, b, strict=False)
                if not ((pa_ >= 0) & (pb == pa_ + 1) & (w["start"][pb] == b)).all():
                    self.ok = False
                    self.sums, self.raw, self.pairs = [], [], []
                    return None
            # a part per batch: the windows a batch summed, by their place in the run
            parts = []
            while self.sums:
                r, st, n, v = self.sums.pop(0)
                parts.append((index.position(r, st, strict=False) * N_NAMES + n, v))
            keys, sums = _merge_sums(parts) if parts else (np.zeros(0, np.int64), np.zeros(0))
            if self.raw:
                r, n, st, en, v = (np.concatenate(c) for c in zip(*self.raw))
                pos = index.position(r, en, strict=False)
                ok = (pos >= 0) & (pos < len(w["rank"]))
                ok[ok] &= w["rank"][pos[ok]] == r[ok]
                ok[ok] &= w["prev_end"][pos[ok]] <= st[ok]
                k, s = _sum_by_window(pos[ok], n[ok], v[ok])
                # the kept spans' windows: those summed in a batch too get their sums added,
                # the others come after (the parts need not be in order, only each key once)
                at = np.minimum(np.searchsorted(keys, k), max(len(keys) - 1, 0))
                known = (at < len(keys)) & (keys[at] == k) if len(keys) else np.zeros(len(k), bool)
                np.add.at(sums, at[known], s[known])
                parts_raw = (k[~known], s[~known])
            else:
                parts_raw = (np.zeros(0, np.int64), np.zeros(0))
            analysis.found["early_sums"] = [(keys, sums), parts_raw]
            self.sums, self.raw, self.pairs = [], [], []
        found: list[tuple[np.ndarray, np.ndarray]] = analysis.found["early_sums"]
        return found

    def step_children(self, step_ids: np.ndarray) -> dict[str, np.ndarray] | None:
        """The depth-1 spans the first pass kept whose parent is a step (asked once)."""
        if not self.kids:
            return None
        found_kids, self.kids = self.kids, {}  # second_pass keeps the answer
        if len(step_ids) and len(found_kids["parent_id"]):
            parent = found_kids["parent_id"]
            at = np.minimum(np.searchsorted(step_ids, parent), len(step_ids) - 1)
            hit = step_ids[at] == parent
        else:
            hit = np.zeros(len(found_kids["parent_id"]), bool)
        if hit.all():
            return found_kids
        return {c: found_kids[c][hit] for c in self.KID_COLUMNS}


def _spark_window_sums(
    analysis: RankAnalysis,
    w: dict[str, np.ndarray],
    index: PerRank,
    wanted_sorted: np.ndarray,
    n_names: int,
) -> tuple[np.ndarray, np.ndarray]:
    """second_pass's window sums, grouped by Spark (spark.py ``window_sums``): the same
    (window position * n_names + name code, self time) pairs the loop builds."""
    table = analysis.source.spark.window_sums(analysis.collective_sql())
    rank = table.column("rank").to_numpy().astype(np.int64)
    start = table.column("start_ns").to_numpy().astype(np.int64)
    pos = index.position(rank, start, strict=False)
    ok = (pos >= 0) & (pos < len(w["rank"]))
    ok[ok] &= (w["rank"][pos[ok]] == rank[ok]) & (w["start"][pos[ok]] == start[ok])
    ok[ok] &= wanted_sorted[pos[ok]]
    names = analysis.strings.codes(table.column("name")).astype(np.int64)
    sums = table.column("self_ns").to_numpy().astype(np.float64)
    return pos[ok] * n_names + names[ok], sums[ok]


def _reasons(analysis: RankAnalysis, flagged: np.ndarray, steps_last: np.ndarray) -> dict[int, str]:
    """``rank index: reason`` for the ranks ``flagged``."""
    m, inst = analysis.m, analysis.inst
    culprit = m["rank_idx"][inst["last_row"]]
    wanted = wanted_windows(analysis, flagged)
    if "sums" not in analysis.found:
        second_pass(analysis, wanted, kids=False)
    spans, names, sums = analysis.found["sums"]
    # every wanted window also gets its untracked time (window length less the spans' self)
    w = _windows(analysis)
    position = np.empty(len(w["order"]), np.int64)
    position[w["order"]] = np.arange(len(w["order"]))
    untracked_code = analysis.strings.code(UNTRACKED)
    win_spans = np.flatnonzero(wanted)
    prev_end = w["prev_end"][position[win_spans]]
    finite = prev_end > np.iinfo(np.int64).min
    length = np.where(
        finite, analysis.coll["start_ns"][win_spans] - np.where(finite, prev_end, 0), 0
    )
    covered = np.zeros(len(analysis.coll["rank"]))
    np.add.at(covered, spans, sums)
    untracked = np.where(finite, length - covered[win_spans], 0)
    spans = np.r_[spans, win_spans]
    names = np.r_[names, np.full(len(win_spans), untracked_code)]
    sums = np.r_[sums, untracked]
    row = analysis.row_of_span[spans]
    instance, rank_idx = m["instance"][row], m["rank_idx"][row]
    reasons = {}
    n_ranks = len(analysis.ranks)
    for ri in map(int, np.flatnonzero(flagged)):
        late = np.flatnonzero(culprit == ri)  # instances it arrived last at
        slot = np.full(len(inst["start"]), -1, np.int64)
        slot[late] = np.arange(len(late))
        mine = slot[instance] >= 0
        best_name, best_excess = None, 0.0
        for code in np.unique(names[mine & (rank_idx == ri)]):
            pick = mine & (names == code)
            dense = np.zeros((len(late), n_ranks))
            np.add.at(dense, (slot[instance[pick]], rank_idx[pick]), sums[pick])
            excess = float((dense[:, ri] - np.median(dense, axis=1)).sum())
            if excess > best_excess:
                best_name, best_excess = analysis.strings.values[code], excess
        rank = int(analysis.ranks[ri])
        steps = int(steps_last[ri])
        of = (
            f"{steps:,} of {analysis.n_steps:,} steps"
            if analysis.n_steps
            else f"{len(late):,} collectives"
        )
        if best_name is None:
            reasons[ri] = (
                f"rank {rank}: late, though no span of it is slower than the median rank's ({of})"
            )
        else:
            per = best_excess / max(steps if analysis.n_steps else len(late), 1)
            unit = "a step" if analysis.n_steps else "a collective"
            reasons[ri] = (
                f"rank {rank}: {best_name} +{human_ns(per)} {unit} over the median rank, {of}"
            )
    return reasons


def straggler_table(analysis: RankAnalysis) -> pa.Table:
    blame, wait = analysis.blame()
    p, expected, flagged = analysis.straggler_test(blame)
    steps_last = analysis.steps_last()
    reasons = _reasons(analysis, flagged, steps_last) if flagged.any() else {}
    if_median = analysis.if_median()
    table = pa.table(
        {
            "rank": pa.array(analysis.ranks.astype(np.int32)),
            "blame_ns": pa.array(blame),
            "wait_ns": pa.array(wait),
            "steps_last": pa.array(steps_last.astype(np.int64)),
            "straggler": pa.array(flagged),
            "reason": pa.array([reasons.get(i) for i in range(len(analysis.ranks))], pa.string()),
            "step_ns_if_median": pa.array(if_median, mask=np.isnan(if_median)),
        }
    )
    test = {
        "test": "Bennett bound on blame, last arriver uniform in its group; Bonferroni",
        "alpha": analysis.options.alpha,
        "min_share": analysis.options.min_share,
        "p": {int(r): float(v) for r, v in zip(analysis.ranks, p)},
        "expected_blame_ns": {int(r): float(v) for r, v in zip(analysis.ranks, expected)},
    }
    return table.replace_schema_metadata(analysis._meta(**test))


def _index_kids(analysis: RankAnalysis, kids: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The step spans' children with their step and rank index, by (rank, step, start)."""
    order = np.argsort(analysis.steps["span_id"].astype(np.uint64))
    sorted_ids = analysis.steps["span_id"].astype(np.uint64)[order]
    if len(sorted_ids):
        kids["step"] = analysis.steps["step"][order[np.searchsorted(sorted_ids, kids["parent_id"])]]
    else:
        kids["step"] = kids["rank"].astype(np.int64)
    kids["rank_idx"] = np.searchsorted(analysis.ranks, kids["rank"]).astype(np.int32)
    keep = ("rank_idx", "step", "name", "start_ns", "end_ns")  # what the walk reads
    if sorted_by(kids["rank_idx"], kids["step"], kids["start_ns"]):
        return {k: kids[k] for k in keep}  # a part per rank, read in order: sorted already
    by = np.lexsort((kids["start_ns"], kids["step"], kids["rank_idx"]))
    return {k: kids[k][by] for k in keep}


def _step_children(analysis: RankAnalysis) -> dict[str, np.ndarray]:
    if "kids" not in analysis.found:
        second_pass(analysis, None, kids=True)
    kids: dict[str, np.ndarray] = analysis.found["kids"]
    return kids


def critical_path_table(analysis: RankAnalysis) -> pa.Table:
    m, inst, s = analysis.m, analysis.inst, analysis.steps
    kids = _step_children(analysis)
    n_steps = analysis.n_steps + 1
    kid_key = kids["rank_idx"] * n_steps + kids["step"]
    # collective rows of each rank, by start, and their step
    by_rank = np.lexsort((m["start"], m["rank_idx"]))
    coll_key = m["rank_idx"][by_rank] * n_steps + m["step"][by_rank]
    place = np.empty(len(by_rank), np.int64)
    place[by_rank] = np.arange(len(by_rank))
    inst_of_row = m["instance"]
    last_row = inst["last_row"]
    step_key = s["rank_idx"] * n_steps + s["step"]
    aligned_end = s["end_ns"] - analysis.offset[s["rank_idx"]]
    out: dict[str, list[Any]] = {"step": [], "rank": [], "name": [], "start_ns": [], "end_ns": []}

    def emit(step: int, ri: int, lo: int, hi: int) -> list[tuple[Any, ...]]:
        """The step's children on rank ``ri`` within [lo, hi], clipped."""
        key = ri * n_steps + step
        a, b = np.searchsorted(kid_key, key), np.searchsorted(kid_key, key, side="right")
        st, en = kids["start_ns"][a:b], kids["end_ns"][a:b]
        inside = (st >= lo) & (en <= hi)
        return [
            (step, ri, int(kids["name"][a + j]), max(int(st[j]), lo), min(int(en[j]), hi))
            for j in np.flatnonzero(inside)
        ]

    step_starts, step_counts = group_bounds(s["step"][np.argsort(s["step"], kind="stable")])
    by_step = np.argsort(s["step"], kind="stable")
    for k_start, k_count in zip(step_starts, step_counts):
        rows_k = by_step[k_start : k_start + k_count]
        k = int(s["step"][rows_k[0]])
        final = rows_k[np.argmax(aligned_end[rows_k])]
        ri, hi = int(s["rank_idx"][final]), int(s["end_ns"][final])
        segments: list[tuple[Any, ...]] = []
        while True:
            key = ri * n_steps + k
            a, b = np.searchsorted(coll_key, key), np.searchsorted(coll_key, key, side="right")
            mine = by_rank[a:b]
            mine = mine[m["end"][mine] <= hi]
            step_row = np.searchsorted(step_key, key)
            if not len(mine):
                lo = (
                    int(s["start_ns"][step_row])
                    if step_row < len(step_key) and step_key[step_row] == key
                    else hi
                )
                segments += emit(k, ri, lo, hi)[::-1]
                break
            row = mine[-1]
            segments += emit(k, ri, int(m["end"][row]), hi)[::-1]
            lr = last_row[inst_of_row[row]]
            segments.append(
                (
                    k,
                    int(m["rank_idx"][lr]),
                    int(m["name"][lr]),
                    int(m["start"][lr]),
                    int(m["end"][lr]),
                )
            )
            ri, hi = int(m["rank_idx"][lr]), int(m["start"][lr])
            # continue on the last arriver, before its arrival, if it is in this step
            if m["step"][lr] != k:
                break
        for seg in reversed(segments):
            out["step"].append(seg[0])
            out["rank"].append(int(analysis.ranks[seg[1]]))
            out["name"].append(analysis.strings.values[seg[2]])
            out["start_ns"].append(seg[3])
            out["end_ns"].append(seg[4])
    table = pa.table(
        {
            "step": pa.array(out["step"], pa.int64()),
            "rank": pa.array(out["rank"], pa.int32()),
            "name": pa.array(out["name"], pa.string()),
            "start_ns": pa.array(out["start_ns"], pa.int64()),
            "end_ns": pa.array(out["end_ns"], pa.int64()),
        }
    )
    return table.replace_schema_metadata(analysis._meta())


def critical_summary(path: pa.Table) -> pa.Table:
    """Per name: its time on the critical path and its share of it, largest first."""
    names = path.column("name").to_pylist()
    length = (
        (path.column("end_ns").to_numpy() - path.column("start_ns").to_numpy())
        if path.num_rows
        else np.zeros(0)
    )
    totals: dict[str, int] = {}
    for name, ns in zip(names, length):
        totals[name] = totals.get(name, 0) + int(ns)
    whole = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    return pa.table(
        {
            "name": pa.array([n for n, _ in ranked], pa.string()),
            "critical_ns": pa.array([v for _, v in ranked], pa.int64()),
            "share": pa.array([v / whole if whole else math.nan for _, v in ranked], pa.float64()),
        }
    ).replace_schema_metadata(path.schema.metadata)
