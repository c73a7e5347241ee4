"""Running the application under uvicorn on a socket bound here, so that port 0 (a free
port) is known before the first request and printed for whoever started the server."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from typing import Callable

__all__ = ["serve"]


def serve(
    root: str | os.PathLike,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    perfetto_ui: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the runs under ``root`` until interrupted (SIGINT/SIGTERM end it cleanly).
    ``announce(url)`` is called once the socket listens."""
    import uvicorn

    from .app import create_app

    with tempfile.TemporaryDirectory(prefix="hotspan-serve-") as cache:
        app = create_app(
            root, token=token, cache=cache, **({"perfetto_ui": perfetto_ui} if perfetto_ui else {})
        )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.set_inheritable(True)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, timeout_graceful_shutdown=5
        )
        server = uvicorn.Server(config)
        if announce is not None:
            announce(f"http://{shown}:{bound}/")
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
            sys.stdout.flush()
