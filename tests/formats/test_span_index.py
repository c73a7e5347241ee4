"""One index of a table's span ids serves both passes over its parent links (self time,
then the schema's rules): the answers with a shared index are those each pass gives with
its own, for ids in a dense range and spread over ranks, with an id given twice too."""

from __future__ import annotations

import numpy as np
import pytest

from hotspan._span_tree import SpanIndex, self_times, span_rules


def _tree(spread: bool, repeat: bool):
    rng = np.random.default_rng(7)
    n = 5000
    ids = np.arange(1, n + 1, dtype=np.uint64)
    if spread:  # ranks' ids: a high part per rank, too wide for the dense array
        ids = ids | (rng.integers(0, 4, n).astype(np.uint64) << np.uint64(48))
    if repeat:
        ids[4000] = ids[17]
    # a chain of roots each with children: parent = the previous root
    parent = np.where(np.arange(n) % 5 == 0, 0, ids[(np.arange(n) // 5) * 5]).astype(np.uint64)
    has_parent = (np.arange(n) % 5 != 0).astype(np.uint8)
    start = (np.arange(n) // 5 * 100 + np.arange(n) % 5 * 10).astype(np.int64)
    end = start + np.where(np.arange(n) % 5 == 0, 90, 8).astype(np.int64)
    depth = (np.arange(n) % 5 != 0).astype(np.int32)
    thread = np.zeros(n, np.int64)
    return ids, parent, has_parent, start, end, depth, thread


@pytest.mark.parametrize("spread", [False, True])
@pytest.mark.parametrize("repeat", [False, True])
def test_a_shared_index_gives_the_same_answers(spread, repeat):
    ids, parent, has_parent, start, end, depth, thread = _tree(spread, repeat)
    index = SpanIndex(ids)
    assert index.rows == len(ids)
    assert index.repeat == (4000 if repeat else -1)
    own = self_times(start, end, ids, parent, has_parent, thread)
    shared = self_times(start, end, ids, parent, has_parent, thread, index=index)
    assert own is not None and shared is not None
    assert np.array_equal(own, shared)
    if not repeat:
        assert own[0] == 90 - 4 * 8  # the root's children cover 4 x 8 ns
    rules = span_rules(ids, parent, has_parent, start, end, end - start, depth)
    assert span_rules(ids, parent, has_parent, start, end, end - start, depth, index=index) == rules
    assert rules[3] == (4000 if repeat else -1)
    # and again: an index is not used up by a pass
    assert np.array_equal(self_times(start, end, ids, parent, has_parent, thread, index=index), own)


def test_an_index_of_other_rows_is_refused():
    ids, parent, has_parent, start, end, depth, thread = _tree(False, False)
    other = SpanIndex(ids[:10])
    with pytest.raises(ValueError, match="an index of 10 rows"):
        self_times(start, end, ids, parent, has_parent, thread, index=other)
    with pytest.raises(ValueError, match="an index of 10 rows"):
        span_rules(ids, parent, has_parent, start, end, end - start, depth, index=other)


def test_an_empty_index():
    index = SpanIndex(np.zeros(0, np.uint64))
    assert (index.rows, index.repeat) == (0, -1)


@pytest.mark.parametrize("offset", [0, 1, 5, 8, 13])
def test_the_tree_columns_has_parent_of_a_sliced_column_with_nulls(offset):
    """``has_parent`` read from the parent column's validity bits: 1 exactly where a
    parent is given, a slice (its offset mid-byte) included, and in several chunks."""
    import pyarrow as pa

    from hotspan._selftime import tree_columns

    rng = np.random.default_rng(offset)
    n = 1000
    parents = pa.array(rng.integers(1, 50, n).astype(np.uint64), mask=rng.random(n) < 0.3)
    table = pa.table(
        {"span_id": pa.array(np.arange(1, n + 1, dtype=np.uint64)), "parent_id": parents}
    )
    for piece in (
        table.slice(offset, n - 2 * offset),
        pa.concat_tables([table.slice(0, 7), table.slice(7)]),
    ):
        _, parent_id, has_parent = tree_columns(piece)
        valid = piece.column("parent_id").is_valid().to_numpy(zero_copy_only=False)
        assert (
            has_parent.dtype == np.uint8 and has_parent.tolist() == valid.astype(np.uint8).tolist()
        )
        given = valid.astype(bool)
        expected = piece.column("parent_id").to_numpy(zero_copy_only=False)[given]
        assert parent_id[given].tolist() == expected.astype(np.uint64).tolist()
