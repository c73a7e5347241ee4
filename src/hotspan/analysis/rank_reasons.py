"""What the across-ranks kernel (ranks.py) answers from a second pass over the spans: why a
straggler arrives late (its spans since its previous collective against the median rank's)
and the critical path of each step."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..units import human_ns
from .rank_kernel import PerRank, group_bounds, sorted_by

if TYPE_CHECKING:
    from .rank_kernel import RankAnalysis

UNTRACKED = "(untracked)"


def _windows(analysis: RankAnalysis) -> dict[str, np.ndarray]:
    """Every collective span of each rank in start order, with the end of the one before it
    on that rank (the start of the window in which the rank worked towards it)."""
    if "windows" in analysis.found:
        return analysis.found["windows"]
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
    n_names = 1 << 20
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    kid_cols = ("rank", "name", "start_ns", "end_ns", "parent_id")
    found_kids: dict[str, list[np.ndarray]] = {c: [] for c in kid_cols}
    columns = ["category", "name", "rank", "start_ns", "end_ns"]
    columns += ["self_ns"] if wanted is not None else []
    columns += ["parent_id", "depth"] if kids else []
    for table in analysis.source.batches(tuple(columns)):
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
        at_pos, names = pos[ok].astype(np.int64), names_all[ok].astype(np.int64)
        low, span = int(at_pos.min()), int(at_pos.max() - at_pos.min() + 1)
        n_seen = int(names.max()) + 1
        if span * n_seen <= 4 * len(at_pos) + 4096:
            # a batch holds a few ranks' spans in order: their windows are a short range
            sums = np.bincount(
                (at_pos - low) * n_seen + names, weights=self_ns, minlength=span * n_seen
            )
            nz = np.flatnonzero(sums)
            parts.append(((nz // n_seen + low) * n_names + nz % n_seen, sums[nz]))
        else:
            uniq, inverse = np.unique(at_pos * n_names + names, return_inverse=True)
            parts.append((uniq, np.bincount(inverse, weights=self_ns)))
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
    uniq, inverse = np.unique(np.concatenate([u for u, _ in parts]), return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate([s for _, s in parts]))
    analysis.found["sums"] = (w["order"][uniq // n_names], uniq % n_names, sums)


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
    return analysis.found["kids"]


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
    out: dict[str, list] = {"step": [], "rank": [], "name": [], "start_ns": [], "end_ns": []}

    def emit(step: int, ri: int, lo: int, hi: int) -> list[tuple]:
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
        segments: list[tuple] = []
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
