"""Who may ask, and what may be read: the token, the bind address, and paths outside the
served directory."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ._serving import Server


@pytest.fixture(scope="module")
def guarded(runs_dir):
    srv = Server(runs_dir, "--token", "s3cret-token")
    yield srv
    srv.stop()


ROUTES = (
    "/",
    "/v1/traces",
    "/openapi.json",
    "/static/serve.js",
    "/compare",
    "/v1/traces/nope",
    "/no/such/page",
)


@pytest.mark.slow
def test_without_the_token_every_request_is_401(guarded):
    assert "(token required)" in guarded.announced
    with guarded.client() as c:
        for route in ROUTES:
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": "s3cret-token"},
                {"Authorization": "Bearer s3cret-token-and-more"},
                {"Authorization": "Basic s3cret-token"},
            ):
                response = c.get(route, headers=headers)
                assert response.status_code == 401, (route, headers)
                assert response.headers["www-authenticate"] == "Bearer"
                assert "token" in response.json()["detail"]


def test_with_the_token_requests_pass(guarded):
    with guarded.client(headers={"Authorization": "Bearer s3cret-token"}) as c:
        assert c.get("/v1/traces").status_code == 200
        assert c.get("/").status_code == 200
        assert c.get("/openapi.json").status_code == 200


@pytest.mark.slow
def test_the_token_comes_from_the_environment_too(runs_dir):
    srv = Server(runs_dir, env={"HOTSPAN_TOKEN": "from-env"})
    try:
        with srv.client() as c:
            assert c.get("/v1/traces").status_code == 401
            assert (
                c.get("/v1/traces", headers={"Authorization": "Bearer from-env"}).status_code == 200
            )
    finally:
        srv.stop()


def test_it_binds_to_loopback_by_default(server):
    assert server.url.startswith("http://127.0.0.1:")
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    # The listening socket's own address, as the kernel reports it: 127.0.0.1, not 0.0.0.0.
    table = Path("/proc/net/tcp")
    if not table.exists():
        pytest.skip("no /proc/net/tcp to read the listening address from")
    listening = [
        line.split()[1]
        for line in table.read_text().splitlines()[1:]
        if line.split()[3] == "0A" and int(line.split()[1].split(":")[1], 16) == port
    ]
    assert listening == ["0100007F:%04X" % port]


@pytest.mark.parametrize(
    "params",
    [
        {"by": "../../etc/passwd"},
        {"name": "/etc/passwd"},
        {"category": "a/../../b"},
        {"name": "..\\..\\x"},
        {"name": "C:\\Windows"},
        {"by": "..", "limit": "3"},
    ],
)
def test_paths_in_the_query_are_400(client, ids, params):
    for route in (f"/v1/traces/{ids['job']}/stats", f"/v1/traces/{ids['job']}/spans", "/v1/traces"):
        response = client.get(route, params=params)
        assert response.status_code == 400, (route, params)
        assert "outside the served directory" in response.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/traces/..",
        "/v1/traces/%2e%2e/%2e%2e/etc/passwd",
        "/v1/traces/%2Fetc%2Fpasswd",
        "/static/../runs.py",
        "/static/%2e%2e/app.py",
        "/runs/..%2F..%2Fetc",
    ],
)
def test_paths_in_the_url_are_400(server, path):
    # Sent as they are (httpx would fold the dots before sending).
    host, port = server.url[len("http://") :].strip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    assert status == 400, reply[:300]
    assert b"outside the served directory" in reply


@pytest.mark.slow
def test_a_link_out_of_the_directory_is_not_served(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.parquet"
    root = tmp_path / "runs"
    root.mkdir()
    from ._serving import record_steps
    from hotspan.formats import export

    export(record_steps(1), secret)
    (root / "link.parquet").symlink_to(secret)
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    srv = Server(root)
    try:
        with srv.client() as c:
            assert c.get("/v1/traces").json()["traces"] == []
    finally:
        srv.stop()


def test_cli_refuses_a_missing_directory(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "hotspan", "serve", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"hotspan serve: {tmp_path / 'nope'}: not a directory"


@pytest.mark.slow
def test_cli_refuses_a_port_in_use(runs_dir, server):
    port = server.url.rsplit(":", 1)[1].strip("/")
    result = subprocess.run(
        [sys.executable, "-m", "hotspan", "serve", str(runs_dir), "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"hotspan serve: cannot listen on 127.0.0.1:{port}: ")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_cli_refuses_a_perfetto_ui_that_is_not_a_url(runs_dir):
    result = subprocess.run(
        [sys.executable, "-m", "hotspan", "serve", str(runs_dir), "--perfetto-ui", "file:///x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "hotspan serve: perfetto_ui: 'file:///x' is not an http(s) URL"
