"""Running the application under uvicorn on a socket bound here, so that port 0 (a free
port) is known before the first request and printed for whoever started the server."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn

    from ._queries import Warmer

__all__ = ["Server", "serve", "warm_early"]


def _listening_socket(host: str, port: int) -> tuple[socket.socket, str]:
    """A socket listening on ``host:port`` (0: a free port), and its URL."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{bound}/"


def _uvicorn_server(
    root: str | os.PathLike[str], cache: str, token: str | None, perfetto_ui: str | None
) -> uvicorn.Server:
    import uvicorn

    from .app import create_app

    app = create_app(
        root,
        token=token,
        cache=cache,
        warm=True,
        **({"perfetto_ui": perfetto_ui} if perfetto_ui else {}),
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


def warm_early(root: str | os.PathLike[str], cache: str) -> Warmer | None:
    """Find the runs under ``root`` and start computing their statistics on a thread of its
    own (``queries.Warmer``), before the application's slow imports (FastAPI, uvicorn: about
    a second): a request that asks for them as soon as the server listens finds them done or
    waits for the computation under way (``queries.cached``), never starts a second one.
    The application's own catalog finds the same runs (same ids and versions) and its warmer
    the results cached. Returns the warmer (None where ``root`` cannot be read: the
    application reports it)."""
    from ._queries import Warmer
    from ._runs import Catalog

    try:
        catalog = Catalog(root, cache)
    except OSError:
        return None
    catalog.on_new_version = warmer = Warmer()

    def scan() -> None:
        try:
            catalog.scan()
        except Exception:  # noqa: BLE001  (the requests scan again and report it)
            pass

    threading.Thread(target=scan, name="hotspan-serve-early-scan", daemon=True).start()
    return warmer


def serve(
    root: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    perfetto_ui: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the runs under ``root`` until interrupted (SIGINT/SIGTERM end it cleanly).
    ``announce(url)`` is called once the socket listens. ``Server`` serves from a thread
    instead, until ``close()``."""
    with tempfile.TemporaryDirectory(prefix="hotspan-serve-") as cache:
        warm_early(root, cache)
        server = _uvicorn_server(root, cache, token, perfetto_ui)
        sock, url = _listening_socket(host, port)
        if announce is not None:
            announce(url)
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
            sys.stdout.flush()


class Server:
    """``hotspan serve`` on a thread of this process, until ``close()`` (or the end of a
    ``with`` block); ``url`` is where it listens (``port=0``: a free port)::

        with Server("runs/", port=0) as server:
            httpx.get(server.url + "v1/traces")
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        token: str | None = None,
        perfetto_ui: str | None = None,
    ) -> None:
        self._cache = tempfile.TemporaryDirectory(prefix="hotspan-serve-")
        try:
            self._server = _uvicorn_server(root, self._cache.name, token, perfetto_ui)
            self._socket, self.url = _listening_socket(host, port)
        except BaseException:
            self._cache.cleanup()
            raise
        # Not the main thread: uvicorn leaves the process's signal handlers alone.
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="hotspan-serve",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)  # uvicorn's startup has no event to wait on
        if not self._server.started:
            self.close()
            raise RuntimeError(f"hotspan serve: the server at {self.url} did not start")

    def close(self) -> None:
        """Stop serving (the requests in flight get up to 5 s to finish)."""
        self._server.should_exit = True
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)
        self._socket.close()
        self._cache.cleanup()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<hotspan.serve.Server {self.url} {'running' if self._thread.is_alive() else 'closed'}>"
