"""``hotspan.serve.Server``: serve from a thread of this process until close()."""

from __future__ import annotations

import httpx
import pytest

import hotspan
from hotspan.serve import Server


def test_server_serves_until_closed(tmp_path):
    with hotspan.span("x"):
        pass
    hotspan.export(hotspan.drain(), tmp_path / "a.parquet")
    with Server(tmp_path, port=0) as server:
        reply = httpx.get(server.url + "v1/traces", timeout=30)
        assert reply.status_code == 200
        assert [t["name"] for t in reply.json()["traces"]] == ["a.parquet"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "v1/traces", timeout=5)


def test_server_close_is_the_handles_one_way_to_stop(tmp_path):
    server = Server(tmp_path, port=0, token="s3cret")
    try:
        assert httpx.get(server.url + "v1/traces", timeout=30).status_code == 401
    finally:
        server.close()
    assert "closed" in repr(server)
