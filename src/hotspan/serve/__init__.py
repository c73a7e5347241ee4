"""``hotspan serve DIR``: a JSON API (with its OpenAPI document) and a dashboard over the
runs under a directory. Needs the ``serve`` extra (``pip install 'hotspan[serve]'``).

    from hotspan.serve import create_app, serve
    serve("runs/", host="127.0.0.1", port=8765)          # blocks; `hotspan serve runs/` does this
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from ._server import Server, serve

__all__ = ["Server", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    # Loaded when asked for: ``hotspan serve`` starts computing the runs' statistics before
    # FastAPI and uvicorn are imported (server.serve), which importing this package would
    # otherwise do first.
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("Server", "serve"):
        from . import _server as server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
