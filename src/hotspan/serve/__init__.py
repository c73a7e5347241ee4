"""``hotspan serve DIR``: a JSON API (with its OpenAPI document) and a dashboard over the
runs under a directory. Needs the ``serve`` extra (``pip install 'hotspan[serve]'``).

    from hotspan.serve import create_app, serve
    serve("runs/", host="127.0.0.1", port=8765)          # blocks; `hotspan serve runs/` does this
"""

from __future__ import annotations

from .app import create_app
from .server import Server, serve

__all__ = ["Server", "create_app", "serve"]
