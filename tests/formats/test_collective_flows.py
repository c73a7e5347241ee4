"""Flows between the ranks' spans of one collective instance (issue 31, item 5) in the
Perfetto and Chrome JSON exports: matched as hotspan.collectives matches them (the k-th
span of a name on each rank), chained from the first arrival to the last, so Perfetto UI
draws the arrows; checked in Perfetto's own trace processor, and the exports still load
back to exactly their rows in hotspan."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats._codec_inputs import collective_flows, device_flows, trace_flows
from hotspan.testing import many_ranks

RANKS, STEPS = 4, 3


@pytest.fixture(scope="module")
def table():
    return many_ranks(RANKS, STEPS, seed=5).table()


def _instances(table) -> dict[tuple[str, int], list[int]]:
    """(name, k) -> the span ids of the k-th span of that collective name on every rank."""
    rows = table.filter(pc.equal(table.column("category").cast("string"), "train/comms"))
    seen: dict[tuple[str, int], int] = defaultdict(int)
    out: dict[tuple[str, int], list[int]] = defaultdict(list)
    for row in sorted(rows.to_pylist(), key=lambda r: (r["rank"], r["start_ns"])):
        k = seen[(row["name"], row["rank"])]
        seen[(row["name"], row["rank"])] += 1
        out[(row["name"], k)].append(row["span_id"])
    return out


def _flows(table, chain_in=False):
    flow_out, flow_in = device_flows(table)
    collective_flows(table, flow_out, flow_in, chain_in=chain_in)
    return flow_out, flow_in


def test_each_instance_is_one_chain_from_its_first_arrival_to_its_last(table):
    flow_out, flow_in = _flows(table)
    ids = table.column("span_id").to_pylist()
    row_of = {s: i for i, s in enumerate(ids)}
    start = table.column("start_ns").to_pylist()
    instances = _instances(table)
    assert len(instances) == 2 * STEPS
    used = set()
    for spans in instances.values():
        rows = sorted((row_of[s] for s in spans), key=lambda i: start[i])
        (flow,) = {int(flow_out[i]) for i in rows[:-1]}  # one flow id for the instance
        assert flow and int(flow_in[rows[-1]]) == flow and int(flow_out[rows[-1]]) == 0
        assert all(int(flow_in[i]) == 0 for i in rows[:-1])
        assert flow not in used
        used.add(flow)
    # nothing else is linked
    assert int((flow_out != 0).sum()) == len(instances) * (RANKS - 1)
    assert int((flow_in != 0).sum()) == len(instances)
    # Chrome JSON continues a flow by both ends of one bind_id: the spans inside the chain
    out_json, in_json = _flows(table, chain_in=True)
    assert (out_json == flow_out).all()
    assert int((in_json != 0).sum()) == len(instances) * (RANKS - 1)


def test_no_flows_without_collectives_or_with_one_rank(table):
    category = table.column("category").cast("string")
    plain = table.filter(pc.invert(pc.equal(category, "train/comms")))
    for spans in (plain, many_ranks(1, STEPS, seed=5).table()):
        flow_out, flow_in = _flows(spans, chain_in=True)
        assert not flow_out.any() and not flow_in.any()


@pytest.mark.parametrize("extension", [".pftrace", ".json", ".json.gz"])
def test_the_exports_load_back_to_their_rows(table, extension, tmp_path):
    path = tmp_path / f"trace{extension}"
    hotspan.export(table, path)
    back = hotspan.load(path)
    columns = ["span_id", "name", "start_ns", "end_ns", "rank", "depth"]

    def key(t):
        return sorted(zip(*(t.column(c).cast("string").to_pylist() for c in columns)))

    assert key(back) == key(table)  # the flows add no row


def _trace_flows(path) -> list[tuple[int, int]]:
    """(span_id out, span_id in) of every flow Perfetto's trace processor reads in ``path``."""
    import trace_processor

    with trace_processor.open_trace(path) as tp:
        rows = tp.query(
            "select ao.int_value as a, ai.int_value as b from flow f "
            "join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id "
            "join args ao on ao.arg_set_id = so.arg_set_id and ao.key glob '*.span_id' "
            "join args ai on ai.arg_set_id = si.arg_set_id and ai.key glob '*.span_id'"
        ).as_pandas_dataframe()
    return [(int(a), int(b)) for a, b in zip(rows["a"], rows["b"])]


@pytest.mark.slow  # Perfetto's trace processor under Node
@pytest.mark.parametrize("extension", [".pftrace", ".json"])
def test_perfetto_links_every_instances_spans_and_nothing_else(
    table, extension, tmp_path, perfetto_check
):
    path = tmp_path / f"trace{extension}"
    hotspan.export(table, path)
    perfetto_check(
        path,
        slices=table.num_rows,
        sum_dur=pc.sum(table.column("duration_ns")).as_py(),
        threads=RANKS,
    )
    flows = _trace_flows(path)
    instances = _instances(table)
    assert len(flows) == len(instances) * (RANKS - 1)
    instance_of = {s: key for key, spans in instances.items() for s in spans}
    start = dict(zip(table.column("span_id").to_pylist(), table.column("start_ns").to_pylist()))
    linked: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for a, b in flows:
        assert instance_of[a] == instance_of[b]  # within one instance
        assert start[a] <= start[b]  # from the earlier arrival to the later
        linked[instance_of[a]].append((a, b))
    for key, spans in instances.items():
        edges = linked[key]
        # RANKS - 1 arrows joining all RANKS spans: one chain, in arrival order
        order = sorted(spans, key=lambda s: start[s])
        assert sorted(edges) == sorted(zip(order[:-1], order[1:]))


@pytest.mark.slow  # Perfetto's trace processor under Node
@pytest.mark.parametrize("extension", [".pftrace", ".json"])
def test_perfetto_finds_no_flows_in_a_run_without_collectives(table, extension, tmp_path):
    category = table.column("category").cast("string")
    plain = table.filter(pc.invert(pc.equal(category, "train/comms")))
    path = tmp_path / f"plain{extension}"
    hotspan.export(plain, path)
    assert _trace_flows(path) == []
    assert np.asarray(hotspan.load(path).column("rank")).max() == RANKS - 1


def test_collectives_of_process_groups_are_linked_within_their_group(table):
    """The torch.distributed instrumentation's categories (comms:GROUP): the k-th collective
    of a group on each of its ranks, never across groups."""
    import pyarrow as pa

    rows = table.to_pylist()
    for row in rows:  # all_reduce on the world, all_gather on groups of ranks {0, 1}, {2, 3}
        if row["category"] == "train/comms":
            group = "world" if row["name"] == "all_reduce" else "ab"[row["rank"] // 2]
            row["category"] = f"train/comms:{group}"
    grouped = pa.Table.from_pylist(rows, schema=table.schema)
    flow_out, flow_in = _flows(grouped)
    rank = grouped.column("rank").to_pylist()
    name = grouped.column("name").to_pylist()
    by_flow: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for i in np.flatnonzero((flow_out != 0) | (flow_in != 0)):
        by_flow[int(flow_out[i] or flow_in[i])].add((name[i], rank[i]))
    chains = sorted(sorted(r for _, r in members) for members in by_flow.values())
    assert len(by_flow) == 3 * STEPS  # per step: the world's all_reduce, each group's all_gather
    assert chains.count([0, 1, 2, 3]) == STEPS
    assert chains.count([0, 1]) == STEPS and chains.count([2, 3]) == STEPS
    assert all(len({n for n, _ in members}) == 1 for members in by_flow.values())


@pytest.mark.parametrize("chain_in", [False, True])
def test_trace_flows_is_both_steps_or_none(table, chain_in):
    """What the Chrome JSON writer asks (``trace_flows``): the flows of ``device_flows``
    and ``collective_flows`` together where there are any, None for a table with neither
    device rows nor two ranks (told apart without the per-row arrays), and None too where
    two ranks share no collective."""
    flows = trace_flows(table, chain_in=chain_in)
    assert flows is not None
    for got, expected in zip(flows, _flows(table, chain_in=chain_in)):
        np.testing.assert_array_equal(got, expected)
    one_rank = table.filter(pc.equal(table.column("rank"), 0))
    assert one_rank.num_rows and trace_flows(one_rank, chain_in=chain_in) is None
    quiet = table.filter(
        pc.invert(pc.match_substring(table.column("category").cast("string"), "comms"))
    )
    assert len(set(quiet.column("rank").to_pylist())) > 1
    assert trace_flows(quiet, chain_in=chain_in) is None
    assert trace_flows(table.slice(0, 0), chain_in=chain_in) is None
