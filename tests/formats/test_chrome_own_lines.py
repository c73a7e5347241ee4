"""The Chrome JSON reader's path for our own lines (``Reader.own_row``): numbers read by
inlined C, names taken from a cache of the texts it has seen. Each test holds that path
to the table that was written and to the general path (the same document spelled a little
differently), fed in blocks that cut every number and name somewhere, and counts
the rows that took it: exactly those spelled as the writer spells them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import assert_same_spans

from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.formats import _chrome_codec as codec, _chrome_json as chrome_json, export, load

BASE_NS = 1_700_000_000_000_000_000


def _read(path: Path) -> codec.Reader:
    """The reader after the whole file, as a load feeds it (READ_BLOCK at a time)."""
    reader = codec.Reader(path)
    with open(path, "rb") as raw:
        chrome_json._feed(reader, raw, path, None)
    return reader


def _load_general(path: Path) -> pa.Table:
    """The same document with a blank after each event's brace: not our spelling, so the
    general path reads every event (and, unlike a trip through Python's json module, keeps
    every digit of a number of more than 15)."""
    other = path.with_name("general-" + path.name)
    other.write_bytes(path.read_bytes().replace(b'{"ph"', b'{ "ph"'))
    assert _read(other).own_rows == 0
    return load(other)


def _table(rows: list[dict]) -> pa.Table:
    full = [
        {
            "parent_id": None,
            "category": None,
            "depth": 0,
            "thread_id": 11,
            "thread_name": "MainThread",
            "pid": 11,
            "rank": 0,
            "arg": None,
            "error": False,
            **row,
            "duration_ns": row["end_ns"] - row["start_ns"],
        }
        for row in rows
    ]
    return with_self_ns(pa.Table.from_pylist(full, schema=TRACE_SCHEMA))


def _digits(value: int) -> int:
    return len(str(value))


def _numbers_table() -> tuple[pa.Table, int]:
    """Roots with a child each, whose times from the trace's start have 1 to 16 digits of
    microseconds and 0 to 3 decimals, whose ids have 1 to 20 digits, and whose args have 1
    to 19 (and a sign); and how many rows our own path reads (the others: the general
    one, as a time of 16 digits, an id of 19 or an arg of 19 is not how it is written)."""
    rows: list[dict] = [
        {"span_id": 10**18 - 1, "name": "origin", "start_ns": BASE_NS, "end_ns": BASE_NS}
    ]
    own = 1
    next_id = {digits: 10 ** (digits - 1) for digits in range(1, 21)}
    for int_digits in range(1, 17):
        for decimals in range(4):
            fraction_ns = (0, 400, 450, 456)[decimals]
            start = BASE_NS + (10 ** (int_digits - 1) + 3) * 1000 + fraction_ns
            if start > (1 << 63) - 10**9:
                continue
            id_digits = 1 + (int_digits * 4 + decimals) % 20
            parent = next_id[id_digits] + 1
            child = parent + 1
            next_id[id_digits] += 2
            if child > (1 << 64) - 1 or _digits(child) != id_digits:
                continue
            arg_digits = 1 + (int_digits + decimals) % 19
            arg = 10 ** (arg_digits - 1) + 5
            arg = -arg if decimals == 2 else arg
            duration = (10 ** (decimals * 3) + 7) * 1000 + fraction_ns
            rows.append(
                {"span_id": parent, "name": "parent", "start_ns": start, "end_ns": start + duration}
            )
            rows.append(
                {
                    "span_id": child,
                    "parent_id": parent,
                    "depth": 1,
                    "name": "child",
                    "start_ns": start,
                    "end_ns": start + duration // 2,
                    "arg": arg,
                }
            )
            ours = int_digits <= 15 and id_digits <= 18
            own += ours + (ours and arg_digits <= 18)
    return _table(rows), own


@pytest.mark.parametrize("block", [1, 5, 13, 64, 1 << 20])
def test_numbers_of_every_length_are_read_exactly(tmp_path, monkeypatch, block):
    table, own = _numbers_table()
    path = tmp_path / "numbers.json"
    export(table, path)
    monkeypatch.setattr(chrome_json, "READ_BLOCK", block)
    reader = _read(path)
    assert (reader.n, reader.own_rows) == (table.num_rows, own)
    loaded = load(path)
    assert_same_spans(table, loaded, keep_order=False)
    assert_same_spans(_load_general(path), loaded)


#: Texts that start alike (more than the four a set of the cache holds share their first 8
#: bytes), one the start of another, of every length around 8, 16 and 24, non-ASCII, and
#: with escapes (which the cache never takes: their bytes are not their text).
NAMES = [
    "abcdefgh",
    "abcdefgh1",
    "abcdefgh12",
    "abcdefgh/x",
    "abcdefgh/xy",
    "abcdefghij klmnopqrstuvwxyz 0123456789",
    "abcdefg",
    "abcdef",
    "",
    "a",
    "é",
    "日本語のテキスト",
    'q"uote',
    "back\\slash",
    "tab\there",
    "x" * 16,
    "x" * 17,
    "x" * 24,
    "x" * 25,
]
CATEGORIES = [
    None,
    "train",
    "train/co",
    "train/cop",
    "train/comms",
    "train/compute",
    "train/compute/kernel",
    "train/copy/x",
]


@pytest.mark.parametrize("block", [1, 7, 64, 1000, 1 << 20])
def test_names_that_start_alike_are_told_apart(tmp_path, monkeypatch, block):
    rng = random.Random(block)
    rows = []
    for i in range(3000):
        start = BASE_NS + i * 1000
        rows.append(
            {
                "span_id": i + 1,
                "name": rng.choice(NAMES),
                "category": rng.choice(CATEGORIES),
                "start_ns": start,
                "end_ns": start + rng.randrange(0, 900),
            }
        )
    table = _table(rows)
    path = tmp_path / "names.json"
    export(table, path)
    monkeypatch.setattr(chrome_json, "READ_BLOCK", block)
    reader = _read(path)
    assert reader.own_rows == reader.n == table.num_rows
    assert sorted(reader.names.values) == sorted(NAMES)
    loaded = load(path)
    assert_same_spans(table, loaded)
    assert_same_spans(_load_general(path), loaded)


def test_a_recorded_trace_takes_the_own_path(spans, tmp_path):
    """The spans of a recorded trace (renamed threads, errors, args, instants, escapes, the
    flows between ranks) are read by the own path, but those with a number of more than 18
    digits (an arg of 2**63 - 1, a span id near 2**64), and load as written."""
    path = tmp_path / "trace.json"
    export(spans, path)
    assert b'"bind_id":' in path.read_bytes()
    rows = spans.select(["span_id", "parent_id", "arg"]).to_pylist()
    long = sum(1 for row in rows if max(v or 0 for v in row.values()) >= 10**18)
    reader = _read(path)
    assert (reader.n, reader.own_rows) == (spans.num_rows, spans.num_rows - long)
    assert 0 < long < spans.num_rows / 4
    loaded = load(path)
    assert_same_spans(spans, loaded, keep_order=False)
    assert_same_spans(_load_general(path), loaded)


@pytest.mark.parametrize("threads", [1, 3, 150])
def test_each_row_has_its_threads_columns(tmp_path, threads):
    """A thread's id, pid, rank and name, filled a run of rows at a time (few threads) or
    gathered row by row (many threads of a few rows each): each row its own thread's."""
    rows = []
    for i in range(300):
        thread = i % threads
        start = BASE_NS + i * 1000
        rows.append(
            {
                "span_id": i + 1,
                "name": "work",
                "start_ns": start,
                "end_ns": start + 500,
                "thread_id": 9000 + thread,
                "thread_name": f"worker-{thread}",
                "pid": 400 + thread % 2,
                "rank": thread % 2,
            }
        )
    table = _table(rows)
    path = tmp_path / "threads.json"
    export(table, path)
    assert_same_spans(table, load(path), keep_order=False)


def test_a_rank_or_thread_name_first_given_mid_file(tmp_path):
    """A rank (an arg of some events, or of a B's E) and a thread's own name (an arg of one
    event) that first appear after rows without them: the rows before keep the defaults
    (the file's rank, 7; their thread's name), the rows with them theirs."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1, "name": "a"},
        {"ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1, "name": "b", "args": {"rank": 3}},
        {"ph": "B", "ts": 20, "pid": 1, "tid": 1, "name": "c"},
        {"ph": "E", "ts": 30, "pid": 1, "tid": 1, "args": {"rank": 5}},
        {"ph": "X", "ts": 40, "dur": 5, "pid": 1, "tid": 1, "name": "d"},
        {
            "ph": "X",
            "ts": 50,
            "dur": 5,
            "pid": 1,
            "tid": 1,
            "name": "e",
            "args": {"thread_name": "loader"},
        },
        {"ph": "X", "ts": 60, "dur": 5, "pid": 1, "tid": 1, "name": "f"},
    ]
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 7}}))
    rows = {row["name"]: row for row in load(path).to_pylist()}
    assert {name: row["rank"] for name, row in rows.items()} == {
        "a": 7,
        "b": 3,
        "c": 5,
        "d": 7,
        "e": 7,
        "f": 7,
    }
    names = {name: row["thread_name"] for name, row in rows.items()}
    assert names == {"a": "main", "b": "main", "c": "main", "d": "main", "e": "loader", "f": "main"}


def test_more_rows_than_the_file_size_promised(tmp_path):
    """The reader reserves a row per 100 bytes of file; events of ~60 bytes make it grow
    past that, its columns (over 2 MiB: moved by mremap to an aligned place) keeping every
    row."""
    n = 600_000  # reserved ~360,000: an int64 column past 2 MiB when it grows
    lines = ",\n".join(
        f'{{"ph":"X","ts":{i},"dur":1,"pid":1,"tid":{i % 3},"name":"n{i % 7}"}}' for i in range(n)
    )
    path = tmp_path / "small_events.json"
    path.write_text('{"traceEvents":[\n' + lines + "\n]}")
    assert 2 << 20 < path.stat().st_size // 100 * 8 and path.stat().st_size // 100 < n
    table = load(path)
    assert table.num_rows == n
    rows = sorted(zip(*(table.column(c).to_pylist() for c in ("start_ns", "name", "thread_id"))))
    assert rows == sorted((i * 1000, f"n{i % 7}", i % 3) for i in range(n))
