"""Where a hung job is stuck: every rank's open spans, read from the flight files of its
processes (``HOTSPAN_FLIGHT=PATH``), while they hang or after they were killed, or from the
collector its ranks record to (``grpc://HOST:PORT``: ranks with a flight file send their
open stacks there every few seconds), grouped by state. ``hotspan hang`` prints it.

A rank's state is the innermost open collective span on any of its threads (a span whose
category's last part is ``comms``, or ``comms:GROUP``: then named ``name@GROUP`` unless
GROUP is ``world``): it waits there. A rank in no collective is
``outside``, and its deepest open stack says where it is instead; a process that exited
cleanly is ``exited``. Ranks agree when they all share one state.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["flight_files", "hang", "is_collector"]


def flight_files(targets: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """The flight files ``targets`` name: a file as it is, a directory's flight files; with
    none, every flight file mapped by a process of this user."""
    from ..formats._flight import flight_processes, is_flight_file

    if not targets:
        return sorted({p for paths in flight_processes().values() for p in paths})
    found: list[str] = []
    for target in (str(os.fspath(t)) for t in targets):
        if os.path.isdir(target):
            inside = sorted(os.path.join(target, n) for n in os.listdir(target))
            files = [p for p in inside if os.path.isfile(p) and is_flight_file(p)]
            if not files:
                raise FileNotFoundError(2, "no flight file in this directory", target)
            found += files
        elif not os.path.exists(target):
            raise FileNotFoundError(2, "no such flight file or directory", target)
        else:
            found.append(target)
    return found


def is_collector(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a collector (``grpc://HOST:PORT``) rather than files."""
    return isinstance(target, str) and target.startswith(("grpc://", "grpc+tcp://"))


def hang(
    targets: Sequence[str | os.PathLike[str]] = (),
    *,
    category: str = "comms",
    token: str | None = None,
) -> dict[str, Any]:
    """Every rank's state from the flight files of ``targets`` (see :func:`flight_files`) or
    the open stacks a collector holds (a target ``grpc://HOST:PORT``: ranks recording to it
    with a flight file send theirs every few seconds; ``token`` if it wants one):
    ``ranks`` (per process: rank, pid, alive, state, collective, stack, open_ns),
    ``groups`` (per state: the ranks in it, largest group first), ``agree`` and
    ``summary`` (lines for people). Damaged files are listed under ``unreadable``."""
    from ..formats._flight import stacks

    now = time.time_ns()
    found: list[tuple[Any, int]] = []  # (process, the time now on its clock)
    unreadable: list[str] = []
    collectors = [str(t) for t in targets if is_collector(t)]
    files = [t for t in targets if not is_collector(t)]
    for url in collectors:
        from ..formats._collector_client import fetch_open_stacks

        procs, collector_now = fetch_open_stacks(url, token=token)
        found += [(proc, collector_now) for proc in procs]
    for path in flight_files(files) if files or not collectors else []:
        try:
            found.append((stacks(path), now))
        except FileNotFoundError:
            continue  # gone between the listing and the read
        except ValueError as exc:  # FlightFileError names the file
            unreadable.append(str(exc))
            continue
    return _answer(found, category, unreadable)


def _answer(found: list[tuple[Any, int]], category: str, unreadable: list[str]) -> dict[str, Any]:
    """The answer over processes read from flight files or a collector alike."""
    from ..formats._flight import Frame
    from .._collective_match import group_of, is_collective

    ranks: list[dict[str, Any]] = []
    for proc, now in found:
        end = now if proc.alive else proc.last_seen_ns
        collective: Frame | None = None
        deepest: list[Frame] = []
        for thread in proc.threads:
            frames = thread.stack
            if len(frames) > len(deepest):
                deepest = frames
            for frame in frames:
                if is_collective(frame.category, category):
                    if collective is None or frame.start_ns >= collective.start_ns:
                        collective = frame
                        deepest = frames
        label = None
        if collective is not None:
            # a collective of a process group other than the world's names its group: ranks
            # waiting in two groups' all_reduce are in two places
            group = group_of(collective.category, category)
            label = collective.name if group in (None, "world") else f"{collective.name}@{group}"
        if proc.clean_exit:
            state = "exited"
        elif label is not None:
            state = f"in {label}"
        else:
            state = "outside"
        ranks.append(
            {
                "rank": proc.rank,
                "pid": proc.pid,
                "alive": proc.alive,
                "path": proc.path,
                "state": state,
                "collective": label,
                "stack": [f.name for f in deepest],
                "open_ns": max(0, end - deepest[-1].start_ns) if deepest else 0,
                "collective_ns": None if collective is None else max(0, end - collective.start_ns),
            }
        )
    ranks.sort(key=lambda r: (r["rank"], r["pid"]))
    by_state: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        by_state.setdefault(r["state"], []).append(r)
    groups: list[dict[str, Any]] = [
        {"state": state, "ranks": [r["rank"] for r in members], "count": len(members)}
        for state, members in by_state.items()
    ]
    groups.sort(key=lambda g: (-len(g["ranks"]), g["state"]))
    return {
        "ranks": ranks,
        "groups": groups,
        "agree": len(groups) <= 1,
        "alive": sum(r["alive"] for r in ranks),
        "unreadable": unreadable,
        "summary": _summary(ranks, groups, by_state),
    }


def _listing(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:16]))
    return shown + (f" and {len(ranks) - 16:,} more" if len(ranks) > 16 else "")


def _summary(
    ranks: list[dict[str, Any]], groups: list[dict[str, Any]], by_state: dict[str, list[Any]]
) -> list[str]:
    from .._units import human_ns

    if not ranks:
        return ["no flight file of a rank found (start the ranks with HOTSPAN_FLIGHT=PATH)"]
    lines = []
    main = groups[0]
    main_collective = by_state[main["state"]][0]["collective"]
    for group in groups:
        members = by_state[group["state"]]
        n = group["count"]
        who = f"{n:,} rank{'s' if n > 1 else ''}" if n > 1 else f"rank {members[0]['rank']}"
        if members[0]["collective"] is not None:
            longest = max(m["collective_ns"] for m in members)
            line = f"{who} wait{'' if n > 1 else 's'} in {members[0]['collective']} for up to {human_ns(longest)}"
        elif group["state"] == "exited":
            line = f"{who} exited"
        else:
            stacks = {" > ".join(m["stack"]) or "(no open span)" for m in members}
            where = stacks.pop() if len(stacks) == 1 else "several places"
            never = (
                f" {'are' if n > 1 else 'is'} not in {main_collective}:" if main_collective else ""
            )
            longest = max(m["open_ns"] for m in members)
            line = f"{who}{never} open stack {where} ({human_ns(longest)})"
        if n > 1:
            line += f" (ranks {_listing(group['ranks'])})"
        lines.append(line)
    gone = [r for r in ranks if not r["alive"] and r["state"] != "exited"]
    for where, source in (
        ("read from their flight files", False),
        ("the collector has not heard from them since", True),
    ):
        listed = [r["rank"] for r in gone if is_collector(r["path"]) == source]
        if listed:
            lines.append(f"not running now ({where}): ranks {_listing(listed)}")
    return lines
