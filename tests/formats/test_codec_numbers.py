"""Numbers at every width through the Chrome JSON writer's integer formatting (digits
counted first, then written backwards in place) and back: ids, args and depths of each
number of digits, both sides of every power of ten, the extremes of their types."""

from __future__ import annotations

import json

import pyarrow as pa
from conftest import assert_same_spans, build_spans

from hotspan.formats import export, load

_EDGES = sorted({0, 1} | {v for k in range(1, 20) for v in (10**k - 1, 10**k)})


def test_every_width_of_id_and_arg_round_trips(tmp_path):
    spans = build_spans(seed=5, roots_per_thread=3, longest_root_ns=50_000)
    n = spans.num_rows
    # Ids: each edge and its mirror below 2**64 (then filler), distinct and never 0.
    wide = [v for v in _EDGES if v] + [(1 << 64) - 1 - v for v in _EDGES]
    new_ids = (wide + [5 * 10**11 + i for i in range(n)])[:n]
    assert len(set(new_ids)) == n and n > len(wide)
    ids = spans.column("span_id").to_pylist()
    mapping = dict(zip(ids, new_ids, strict=True))
    parents = [None if v is None else mapping[v] for v in spans.column("parent_id").to_pylist()]
    args = [
        None if i % 7 == 6 else (_EDGES[i % len(_EDGES)] % (1 << 63)) * (-1 if i % 3 else 1)
        for i in range(n)
    ]
    args[:2] = [-(1 << 63), (1 << 63) - 1]
    table = spans.set_column(0, "span_id", pa.array(new_ids, pa.uint64()))
    table = table.set_column(1, "parent_id", pa.array(parents, pa.uint64()))
    table = table.set_column(table.schema.get_field_index("arg"), "arg", pa.array(args, pa.int64()))
    path = tmp_path / "widths.json"
    export(table, path)
    assert_same_spans(table, load(path), keep_order=False)
    # The text itself is plain JSON with exactly those integers (a null arg left out).
    events = json.loads(path.read_text())["traceEvents"]
    written = {
        e["args"]["span_id"]: e["args"].get("arg") for e in events if "span_id" in e.get("args", {})
    }
    assert written == dict(zip(new_ids, args, strict=True))
