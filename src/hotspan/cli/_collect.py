"""``hotspan collect --out DIR``: an Arrow Flight collector writing many ranks' spans to a dataset directory."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import add_command
from ._errors import CliError

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["cmd_collect", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan collect`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "collect",
        "receive spans from many ranks (Arrow Flight) into a dataset directory",
        "Run a collector: an Arrow Flight server that takes the spans of many ranks at once "
        '(hotspan.record("grpc://HOST:PORT") or HOTSPAN_OUT=grpc://HOST:PORT in each rank) and writes '
        "them to DIR/part-r<R>-<pid>-<token>-<n>.parquet as they arrive, each client's times corrected by its "
        "measured clock offset. Binds to 127.0.0.1 unless told otherwise. SIGINT/SIGTERM: finish the "
        "puts in flight, then exit 0. Read the result with `hotspan stats DIR` or hotspan.load(DIR).",
        "hotspan collect --listen grpc://127.0.0.1:8815 --out run/\n"
        "HOTSPAN_OUT=grpc://127.0.0.1:8815 torchrun --nproc-per-node 4 train.py   # the ranks\n"
        "hotspan stats run/ --by rank,name",
        cmd_collect,
    )
    parser.add_argument(
        "--listen",
        default="grpc://127.0.0.1:8815",
        metavar="grpc://HOST:PORT",
        help="address to listen on (default grpc://127.0.0.1:8815; port 0 picks a free one)",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="dataset directory to write (made if missing)"
    )
    parser.add_argument(
        "--token", help="clients must present this token (default: $HOTSPAN_TOKEN, if set)"
    )
    parser.add_argument(
        "--max-put-mb",
        type=float,
        default=256.0,
        metavar="MB",
        help="refuse a put past this many MiB of spans, as it arrives (default 256)",
    )
    parser.add_argument(
        "--duration", type=float, metavar="S", help="stop by itself after S seconds"
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        metavar="N",
        help="run N steps lower in CPU priority (0-19, like `nice -n N`): on a host whose cores "
        "also run ranks, 19 leaves them the CPU and lets the collector take what is idle "
        "(the clients buffer meanwhile)",
    )
    return parser


def _check_port_free(host: str, port: int) -> None:
    """gRPC binds with SO_REUSEPORT and says only "Server did not start properly" when it cannot:
    try the address first, to name the problem (and not share a port with another server)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise CliError(f"--listen: cannot resolve {host}: {exc}") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise CliError(
                f"cannot listen on grpc://{host}:{port}: {exc.strerror or exc}"
            ) from None


def _lower_priority(steps: int) -> None:
    """Run this process ``steps`` nice levels lower. On Linux a nice value belongs to a thread
    and passes to the threads it starts, and pyarrow's import has already started some
    (jemalloc's): every thread running now is lowered, and gRPC's, started later, inherit."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        os.nice(steps)
        return
    target = min(os.getpriority(os.PRIO_PROCESS, 0) + steps, 19)
    for tid in os.listdir(tasks):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), target)
        except ProcessLookupError:
            pass  # a thread that has just exited


def cmd_collect(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..recording import _collector as collector
    from ..recording.recorder import stop_env_recorder

    stop_env_recorder()  # HOTSPAN_OUT inherited from a launcher is for the ranks, not for us
    if not args.max_put_mb > 0:
        raise CliError(f"--max-put-mb: expected a size in MiB above 0, not {args.max_put_mb}")
    if not 0 <= args.nice <= 19:
        raise CliError(f"--nice: expected 0-19 (how much lower than now to run), not {args.nice}")
    if args.nice:
        try:
            _lower_priority(args.nice)
        except OSError as exc:
            raise CliError(f"--nice {args.nice}: {exc.strerror or exc}") from None
    try:
        host, port = collector.parse_url(args.listen)
    except ValueError as exc:
        raise CliError(f"--listen: {exc}") from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"{out}: exists and is not a directory")
    token = args.token if args.token is not None else (os.environ.get("HOTSPAN_TOKEN") or None)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        stop.set()

    if port:
        _check_port_free(host, port)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # our one-line errors, not gRPC's log
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server = collector.CollectorServer(
                out,
                f"grpc://{host}:{port}",
                token=token,
                log=sys.stderr,
                max_put_bytes=int(args.max_put_mb * (1 << 20)),
            )
        except Exception as exc:  # noqa: BLE001 - pyarrow.flight says what: port in use, bad address
            raise CliError(f"cannot listen on grpc://{host}:{port}: {exc}") from None
        if host not in ("127.0.0.1", "localhost", "::1") and not token:
            print(
                f"hotspan collect: warning: listening on {host} without --token: anyone who can reach "
                f"this port can write spans",
                file=sys.stderr,
            )
        print(
            f"hotspan collect: listening on {server.url}, writing to {out}"
            f"{' (token required)' if token else ''}",
            flush=True,
        )
        start = time.monotonic()
        try:
            while not stop.wait(0.2):
                if args.duration is not None and time.monotonic() - start >= args.duration:
                    break
        finally:
            server.shutdown()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(
        f"hotspan collect: {server.spans:,} spans from {len(server.ranks)} rank(s) in {server.parts:,} parts "
        f"-> {out}"
        + (f"; {server.refused} put(s) refused" if server.refused else "")
        + (f"; {server.duplicates} resent batch(es) kept once" if server.duplicates else "")
        + (
            f"; {server.swept} temporary part(s) of a killed collector removed"
            if server.swept
            else ""
        ),
        flush=True,
    )
    return 0
