"""``hotspan serve DIR``: the trace API and the dashboard over the runs under DIR."""

from __future__ import annotations

import argparse
import os
import sys

from ._common import add_command, without_pandas
from ._errors import CliError

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "add_arguments", "cmd_serve", "register"]

DESCRIPTION = (
    "Serve the runs under DIR (every trace file of any format hotspan reads, and every dataset directory "
    "part-*.parquet, found anywhere below it; new runs appear without a restart): a JSON API under /v1 "
    "(its OpenAPI document at /openapi.json) and pages: the list of runs, a page per run (phases per rank, "
    "statistics, timeline, Open in Perfetto UI) and a comparison of two. Binds to 127.0.0.1 unless told "
    "otherwise; with --token (or $HOTSPAN_TOKEN) every request must send 'Authorization: Bearer TOKEN'. "
    "Needs the serve extra: pip install 'hotspan[serve]'."
)
HELP = "a trace API and a dashboard over the runs under a directory"
EXAMPLE = (
    "hotspan serve runs/                      # then open http://127.0.0.1:8765/\n"
    "curl -s http://127.0.0.1:8765/v1/traces | jq '.traces[].path'\n"
    "HOTSPAN_TOKEN=s3cret hotspan serve runs/ --host 0.0.0.0 --port 9000"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan serve`` to the subcommands ``sub``."""
    parser = add_command(sub, "serve", HELP, DESCRIPTION, EXAMPLE, cmd_serve)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="the directory whose runs to serve")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)"
    )
    parser.add_argument(
        "--token", help="require 'Authorization: Bearer TOKEN' (default: $HOTSPAN_TOKEN, if set)"
    )
    parser.add_argument(
        "--perfetto-ui",
        metavar="URL",
        help="the Perfetto UI that 'Open in Perfetto UI' opens (default https://ui.perfetto.dev; "
        "a self-hosted one where that cannot be reached)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.directory):
        raise CliError(f"{args.directory}: not a directory")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port: {args.port} is not a port (0-65535)")
    try:
        from ..serve import serve
    except ImportError as exc:
        raise CliError(
            f"needs the serve extra ({exc.name} is missing): pip install 'hotspan[serve]'"
        ) from None
    token = args.token or os.environ.get("HOTSPAN_TOKEN") or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(
            f"hotspan serve: warning: listening on {args.host} without --token: anyone who can reach this "
            f"port can read every run under {args.directory}",
            file=sys.stderr,
        )

    def announce(url: str) -> None:
        print(
            f"hotspan serve: {url} serving {os.path.abspath(args.directory)}"
            f"{' (token required)' if token else ''}",
            flush=True,
        )

    try:
        # Nothing the server answers goes through pandas: its first statistics need not wait
        # for pyarrow to import it (see without_pandas).
        with without_pandas():
            serve(
                args.directory,
                host=args.host,
                port=args.port,
                token=token,
                perfetto_ui=args.perfetto_ui,
                announce=announce,
            )
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    except ValueError as exc:  # an option the application refuses (--perfetto-ui not a URL)
        raise CliError(str(exc)) from None
    return 0
