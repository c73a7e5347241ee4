"""A collector as its readers see it, below the analysis that asks it (``hotspan hang
grpc://HOST:PORT``): its address (:func:`parse_url`), its token's header (:func:`bearer`), and
the open stacks it answers (:func:`fetch_open_stacks`, the ranks it has not heard from for a
while taken as gone: :func:`is_gone`). The collector itself, both ends of its puts, lives in
``recording/_collector.py``; the stacks' sender in ``recording/_open_stacks.py``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

__all__ = ["GRACE_S", "MISSED", "bearer", "fetch_open_stacks", "is_gone", "parse_url"]

#: Missed intervals before a process is taken as gone (plus GRACE_S).
MISSED = 3
GRACE_S = 2.0


def parse_url(url: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``grpc://HOST:PORT`` (or ``HOST:PORT``, ``:PORT``) -> (host, port)."""
    text = url.strip()
    if "://" not in text:
        text = "grpc://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("grpc", "grpc+tcp"):
        raise ValueError(f"{url!r}: expected grpc://HOST:PORT")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port must be a number in 0-65535") from None
    if port is None:
        raise ValueError(f"{url!r}: no port (expected grpc://HOST:PORT)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: expected grpc://HOST:PORT and nothing after it")
    return parts.hostname or default_host, port


def bearer(token: str | None) -> bytes | None:
    """The ``authorization`` header's value for ``token`` (None: no token)."""
    return None if not token else b"Bearer " + token.encode()


def is_gone(now_ns: int, received_ns: int, interval_s: float) -> bool:
    """Whether a process last heard from at ``received_ns`` is taken as gone at ``now_ns``."""
    return now_ns - received_ns > (MISSED * interval_s + GRACE_S) * 1e9


def fetch_open_stacks(
    url: str, *, token: str | None = None, timeout: float = 10.0
) -> tuple[list[Any], int]:
    """The open stacks a collector at ``url`` holds, as
    :class:`~hotspan.formats._flight.FlightProcess` (``path`` names the collector, rank and
    pid), and the collector's time now. OSError when it cannot be reached or refuses."""
    import pyarrow as pa
    import pyarrow.flight as flight

    from ._flight import FlightProcess, FlightThread, Frame

    host, port = parse_url(url)
    where = f"grpc://{host}:{port}"
    headers = [(b"authorization", bearer(token))] if token else []
    options = flight.FlightCallOptions(timeout=timeout, headers=headers)
    try:
        client = flight.FlightClient(where)
    except (flight.FlightError, pa.ArrowException) as exc:
        raise OSError(f"{where}: {exc}") from None
    try:
        results = list(client.do_action(flight.Action("open_stacks", b""), options=options))
    except flight.FlightUnauthenticatedError:
        raise OSError(
            f"{where}: the collector refused the token (--token, or $HOTSPAN_TOKEN)"
        ) from None
    except flight.FlightServerError as exc:
        raise OSError(
            f"{where}: the collector does not keep open stacks (an older hotspan?): {exc}"
        ) from None
    except (flight.FlightError, pa.ArrowException) as exc:
        raise OSError(f"{where}: no collector answers there: {str(exc).splitlines()[0]}") from None
    finally:
        client.close()
    try:
        info = json.loads(results[0].body.to_pybytes())
        now = int(info["now_ns"])
        procs = []
        for p in info["processes"]:
            stale = is_gone(now, p["received_ns"], p["interval_s"])
            threads = [
                FlightThread(
                    t["thread_id"],
                    t["thread_name"],
                    [
                        Frame(span_id, None, depth, name, category, start, None)
                        for span_id, depth, name, category, start in t["stack"]
                    ],
                    t["complete"],
                )
                for t in p["threads"]
            ]
            procs.append(
                FlightProcess(
                    f"{where} rank {p['rank']} pid {p['pid']}@{p['host']}",
                    p["pid"],
                    p["rank"],
                    not p["exited"] and not stale,
                    p["exited"],
                    p["received_ns"],
                    threads,
                )
            )
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise OSError(f"{where}: not a collector's open stacks: {exc}") from None
    return procs, now
