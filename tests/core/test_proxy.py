"""hotspan.wrap: one span per method call of a real object (sqlite3, sockets, asyncio streams)."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time

import pytest

import hotspan
from hotspan import _native
from hotspan.proxy import target

pytestmark = pytest.mark.usefixtures("fresh")


def _rows():
    return (
        hotspan.drain()
        .select(["name", "category", "error", "arg", "duration_ns", "depth"])
        .to_pylist()
    )


def test_sqlite_connection_and_cursor_methods():
    conn = hotspan.wrap(sqlite3.connect(":memory:"))
    conn.execute("create table t (x integer)")
    with conn:  # the connection's own context manager (commit) passes through
        conn.executemany("insert into t values (?)", [(i,) for i in range(10)])
    cur = hotspan.wrap(conn.cursor(), category="sql")
    cur.execute("select x from t order by x")
    assert cur.fetchone() == (0,)
    assert [row for row in cur] == [(i,) for i in range(1, 10)]  # iteration passes through
    assert conn.total_changes == 10  # attributes read through
    conn.isolation_level = None  # ... and written through
    assert target(conn).isolation_level is None
    rows = _rows()
    assert [(r["name"], r["category"]) for r in rows] == [
        ("Connection.execute", "db"),
        ("Connection.executemany", "db"),
        ("Connection.cursor", "db"),
        ("Cursor.execute", "sql"),
        ("Cursor.fetchone", "sql"),
    ]
    assert not any(r["error"] for r in rows)


def test_exceptions_mark_the_span_and_propagate_unchanged():
    conn = hotspan.wrap(sqlite3.connect(":memory:"))
    with pytest.raises(sqlite3.OperationalError, match="syntax error") as info:
        conn.execute("not sql")
    assert type(info.value) is sqlite3.OperationalError
    (row,) = _rows()
    assert row["name"] == "Connection.execute" and row["error"] is True


def test_methods_limits_what_is_recorded_and_spans_are_cached():
    conn = hotspan.wrap(sqlite3.connect(":memory:"), methods=["execute"])
    first = conn.execute
    assert conn.execute is first  # the per-method wrapper (and its span) is built once
    conn.execute("select 1")
    conn.cursor().close()  # not listed: not recorded
    assert [r["name"] for r in _rows()] == ["Connection.execute"]
    with pytest.raises(AttributeError, match="no method 'nope'"):
        hotspan.wrap(sqlite3.connect(":memory:"), methods=["nope"])


def test_socket_pair_over_loopback():
    a, b = socket.socketpair()
    try:
        pa_, pb = hotspan.wrap(a, category="net"), hotspan.wrap(b, category="net")
        assert pa_.send(b"hello") == 5
        assert pb.recv(16) == b"hello"
        pb.settimeout(0.05)
        assert pb.gettimeout() == 0.05  # a C method's result passes through
        with pytest.raises(TimeoutError):
            pb.recv(16)  # nothing to read: times out, recorded as an error
        assert pa_.family == socket.AF_UNIX  # a property of socket.socket
    finally:
        a.close()
        b.close()
    rows = _rows()
    assert [(r["name"], r["error"]) for r in rows] == [
        ("socket.send", False),
        ("socket.recv", False),
        ("socket.settimeout", False),
        ("socket.gettimeout", False),
        ("socket.recv", True),
    ]
    assert rows[-1]["duration_ns"] >= 40_000_000  # the span covers the blocking call


def test_tcp_listener_on_loopback():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = hotspan.wrap(
            socket.create_connection(("127.0.0.1", port)), category="net", methods=["sendall"]
        )
        conn, _ = server.accept()
        with conn, client:  # socket's own context manager, through the proxy
            client.sendall(b"x" * 1000)
            got = b""
            while len(got) < 1000:
                got += conn.recv(1000)
    assert [r["name"] for r in _rows()] == ["socket.sendall"]
    assert target(client).fileno() == -1  # closed by the with block


def test_asyncio_stream_pair_spans_cover_the_await():
    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(4)
            await asyncio.sleep(0.03)  # the reply comes late: the client's read waits for it
            writer.write(b"pong")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", port)
        reader = hotspan.wrap(raw_reader, category="net")
        writer = hotspan.wrap(raw_writer, category="net", methods=["write", "drain"])
        writer.write(b"ping")
        await writer.drain()
        assert await reader.read(4) == b"pong"
        raw_writer.close()
        await raw_writer.wait_closed()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    rows = _rows()
    assert [r["name"] for r in rows] == [
        "StreamWriter.write",
        "StreamWriter.drain",
        "StreamReader.read",
    ]
    assert (
        rows[-1]["duration_ns"] >= 25_000_000
    )  # covers the awaited read, not the coroutine's creation


class _Store:
    """A plain Python class: properties, async methods and special methods."""

    def __init__(self):
        self.items: dict[str, int] = {}

    @property
    def size(self) -> int:
        return len(self.items)

    def put(self, key: str, value: int) -> None:
        self.items[key] = value

    async def fetch(self, key: str) -> int:
        await asyncio.sleep(0.01)
        return self.items[key]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: str) -> int:
        return self.items[key]


def test_python_object_properties_async_and_special_methods():
    store = hotspan.wrap(_Store(), category="kv")
    store.put("a", 1)
    assert store.size == 1 and len(store) == 1 and store["a"] == 1
    assert asyncio.run(store.fetch("a")) == 1
    with pytest.raises(KeyError):
        asyncio.run(store.fetch("missing"))
    rows = _rows()
    assert [(r["name"], r["error"]) for r in rows] == [
        ("_Store.put", False),
        ("_Store.fetch", False),
        ("_Store.fetch", True),
    ]
    assert rows[1]["duration_ns"] >= 9_000_000
    assert not hasattr(hotspan.wrap(socket.socket()), "__len__")  # only what the object has


def test_size_sets_the_arg():
    a, b = socket.socketpair()
    with a, b:
        pb = hotspan.wrap(b, category="net", size=lambda args, kwargs, result: len(result))
        a.send(b"12345")
        assert pb.recv(16) == b"12345"
    assert [r["arg"] for r in _rows()] == [5]


def test_bad_arguments():
    with pytest.raises(TypeError, match="category"):
        hotspan.wrap(object(), category=3)
    with pytest.raises(TypeError, match="size"):
        hotspan.wrap(object(), size=3)
    with pytest.raises(TypeError, match="methods"):
        hotspan.wrap(sqlite3.connect(":memory:"), methods=[1])


def test_per_call_cost_is_a_span_not_an_allocation():
    """A proxied C method costs about what a traced function costs: no Python frame of ours."""
    conn = sqlite3.connect(":memory:")
    proxied = hotspan.wrap(conn)
    n = 20_000
    best_proxy = best_traced = float("inf")
    traced_commit = hotspan.traced(name="commit", category="db")(conn.commit)
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            proxied.commit()
        best_proxy = min(best_proxy, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n):
            traced_commit()
        best_traced = min(best_traced, time.perf_counter() - t0)
        hotspan.drain()
    assert best_proxy < best_traced * 2 + 0.01, (best_proxy, best_traced)


def test_set_arg_sets_the_innermost_open_span_only():
    _native._set_arg(7)  # nothing open: nothing to set, no error
    with hotspan.span("outer"):
        with hotspan.span("inner"):
            _native._set_arg(1 << 40)
    with pytest.raises(TypeError, match="int"):
        _native._set_arg("x")
    with pytest.raises(OverflowError):
        _native._set_arg(1 << 70)
    assert {r["name"]: r["arg"] for r in _rows()} == {"outer": None, "inner": 1 << 40}
