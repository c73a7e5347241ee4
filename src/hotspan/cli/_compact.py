"""``hotspan compact DIR_OR_URI``: merge a dataset's small parts (one per flush) into parts of
about 128 MiB, while readers go on reading it (see ``hotspan.recording.compaction``)."""

from __future__ import annotations

import argparse

from .._units import human_bytes, human_ns
from ._common import add_command
from ._errors import CliError, check_dataset

__all__ = ["DESCRIPTION", "EXAMPLE", "HELP", "add_arguments", "cmd_compact", "register"]

HELP = "merge a dataset's small parts into parts of about 128 MiB, readers reading on"
DESCRIPTION = (
    "Merge each writer's small parts (part-r<R>-<pid>-<token>-<n>.parquet, one per flush) of the dataset "
    "DIR_OR_URI (a directory, or s3://, gs://, hdfs://, ...) into parts of about --target-mb. Readers see "
    "every span exactly once throughout: a merged part appears in one atomic step (a link, or one put of the "
    "whole object) and names the parts it replaces, which hotspan's readers leave out from then on; those "
    "are deleted --grace seconds later (until then, readers that know nothing of this, such as DuckDB on the "
    "raw files, see them twice). A local run's counter files (_counters/, one per flush) are merged "
    "likewise, one per process. Run one compaction per dataset at a time."
)
EXAMPLE = "hotspan compact run/\nhotspan compact s3://bucket/run --target-mb 256"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan compact`` to the subcommands ``sub``."""
    parser = add_command(sub, "compact", HELP, DESCRIPTION, EXAMPLE, cmd_compact)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dataset", metavar="DIR_OR_URI", help="the dataset: a directory or a file system URI"
    )
    parser.add_argument(
        "--target-mb",
        type=float,
        default=128.0,
        metavar="MB",
        help="size of a merged part, in MiB of Parquet (default 128)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds the merged parts' inputs stay before they are deleted (default 2)",
    )
    parser.add_argument("--rank", type=int, metavar="R", help="only this rank's parts")


def cmd_compact(args: argparse.Namespace) -> int:
    from ..formats._base import TraceFileError
    from ..recording.compaction import compact

    if not args.target_mb > 0:
        raise CliError(f"--target-mb: expected a size in MiB above 0, not {args.target_mb}")
    if not args.grace >= 0:
        raise CliError(f"--grace: expected seconds, 0 or more, not {args.grace}")
    try:
        done = compact(
            check_dataset(args.dataset),
            target_bytes=max(1, int(args.target_mb * (1 << 20))),
            grace_s=args.grace,
            rank=args.rank,
        )
    except (TraceFileError, ValueError) as exc:
        raise CliError(str(exc)) from None
    print(
        f"{done.parts_before} parts -> {done.parts_after} ({human_bytes(done.bytes_before)} -> "
        f"{human_bytes(done.bytes_after)}): {done.merged} merged into {done.written}, "
        f"{done.deleted} deleted, in {human_ns(int(done.seconds * 1e9))}"
    )
    if done.counter_files_after < done.counter_files_before:
        print(f"counters: {done.counter_files_before} files -> {done.counter_files_after}")
    return 0
