"""Every loader is total on bad bytes: a mutation fuzz over valid files of every registered
format (truncation, flipped bytes, huge lengths, wrong JSON/CSV types), seeded, a few
hundred files a format. A load may succeed or raise TraceFileError or OSError; anything
else (another exception, a crash, a hang) fails the test and names the file.

Each format's files are loaded in a worker interpreter: a SIGSEGV (or a sanitizer's abort
under .ci/sanitize, which preloads its runtime into the workers too) ends the worker, not
pytest; the worker restarts after the file that killed it. What loads is also touched
(every value read back, a sort), as a caller would, since broken buffers crash only then.
"""

from __future__ import annotations

import gzip
import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hotspan.formats import FORMATS, export
from hotspan.formats._csv import INCOMPLETE_LAST_ROW
from hotspan.formats._registry import READABLE_EXTENSIONS as EXTENSIONS

from conftest import build_spans

#: Mutated files a format (each run of the suite the same ones: the seed is fixed).
PER_FORMAT = int(os.environ.get("HOTSPAN_FUZZ_FILES", "250"))
SEED = 20261130
#: A worker that takes longer than this on one batch is hung.
BATCH_TIMEOUT_S = 240

WORKER = textwrap.dedent(
    """
    import os, resource, sys, warnings
    # A bounded address space: a loader that allocates without bound (a huge length taken
    # at its word) fails with MemoryError here instead of taking the machine. Not under
    # ASan, whose shadow memory reserves terabytes of address space up front.
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        limit = int(os.environ.get("HOTSPAN_FUZZ_MEMORY", str(4 << 30)))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warnings.simplefilter("ignore")
    from hotspan.formats import TraceFileError, load
    for line in sys.stdin:
        index, path = line.rstrip("\\n").split(" ", 1)
        print("start", index, flush=True)
        try:
            table = load(path)
            table.to_pylist()  # every buffer read: where invalid offsets or indices crash
            table.sort_by([("span_id", "ascending")])
            outcome = "ok"
        except TraceFileError:
            outcome = "refused"
        except OSError:
            outcome = "oserror"
        except BaseException as exc:  # what the test is looking for
            outcome = "other " + type(exc).__name__ + ": " + str(exc).replace("\\n", " ")[:300]
        print("done", index, outcome, flush=True)
    """
)

HUGE = [0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFFFFFFFFFF, 1 << 40]
WRONG_TYPES = [
    b'"x"',
    b"null",
    b"[]",
    b"{}",
    b"-1",
    b"1e400",
    b"99999999999999999999999",
    b"true",
    b'""',
    b"[[[[[[[[[[",
]


def mutate(data: bytes, rng: random.Random, gz: bool) -> bytes:
    """One mutation of ``data``; for a gzip file, half the time of its inflated content."""
    if gz and rng.random() < 0.5:
        return gzip.compress(mutate(gzip.decompress(data), rng, gz=False), mtime=0)
    kind = rng.choice(
        ["truncate", "flip", "flip", "huge", "wrong_type", "splice", "zero_run", "duplicate"]
    )
    data = bytearray(data)
    n = len(data)
    if kind == "truncate":
        return bytes(data[: rng.randrange(n)])
    if kind == "flip":
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
        return bytes(data)
    if kind == "huge":  # a length, count or offset made enormous (a varint too, for protobuf)
        at = rng.randrange(max(1, n - 8))
        value = rng.choice(HUGE)
        if rng.random() < 0.3:
            data[at : at + 1] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"  # a 10-byte varint
        else:
            size = rng.choice([4, 8])
            data[at : at + size] = struct.pack("<Q", value)[:size]
        return bytes(data)
    if kind == "wrong_type":  # a number (or a token) replaced by another JSON/CSV type
        digits = [i for i in range(0, n, max(1, n // 4096)) if chr(data[i]).isdigit()]
        if not digits:
            return bytes(data[: n // 2])
        at = rng.choice(digits)
        end = at
        while end < n and chr(data[end]).isdigit():
            end += 1
        data[at:end] = rng.choice(WRONG_TYPES)
        return bytes(data)
    if kind == "splice":  # a piece of the file copied over another place
        start, length = rng.randrange(n), rng.randrange(1, 256)
        at = rng.randrange(n)
        data[at : at + length] = data[start : start + length]
        return bytes(data)
    if kind == "zero_run":
        at = rng.randrange(n)
        data[at : at + rng.randrange(1, 64)] = bytes(rng.randrange(1, 64))
        return bytes(data)
    at = rng.randrange(n)  # duplicate: a piece repeated in place
    return bytes(data[:at] + data[at : at + rng.randrange(1, 512)] + data[at:])


def one_extension_per_format() -> dict[str, str]:
    """name -> its first extension, for every format of the registry (those added later
    included: the fuzz covers whatever is registered)."""
    chosen: dict[str, str] = {}
    for extension in EXTENSIONS:
        chosen.setdefault(FORMATS[extension].name, extension)
    return chosen


def run_worker(paths: list[Path], env: dict) -> tuple[dict[int, str], list[tuple[int, str]]]:
    """Load ``paths`` in worker interpreters: ({index: outcome}, [(index, crash report)])."""
    outcomes: dict[int, str] = {}
    crashes: list[tuple[int, str]] = []
    todo = list(range(len(paths)))
    while todo:
        feed = "".join(f"{i} {paths[i]}\n" for i in todo)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", WORKER],
                input=feed,
                capture_output=True,
                text=True,
                env=env,
                timeout=BATCH_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            last = [line for line in out.splitlines() if line.startswith("start ")]
            hung = paths[int(last[-1].split()[1])].name if last else "?"
            raise AssertionError(
                f"fuzz worker hung (over {BATCH_TIMEOUT_S} s), last on {hung}"
            ) from None
        started = None
        for line in proc.stdout.splitlines():
            word, index, *rest = line.split(" ", 2)
            if word == "start":
                started = int(index)
            else:
                outcomes[int(index)] = rest[0] if rest else ""
                started = None
        if proc.returncode == 0 and started is None:
            break
        if started is None:  # died between files: nothing to blame, report as is
            raise AssertionError(f"fuzz worker exited {proc.returncode}: {proc.stderr[-3000:]}")
        crashes.append((started, f"exit status {proc.returncode}: {proc.stderr[-1500:]}"))
        if len(crashes) >= 5:
            break
        todo = [i for i in todo if i > started]
    return outcomes, crashes


@pytest.mark.slow
@pytest.mark.parametrize("format_name", list(one_extension_per_format()))
def test_mutated_files_are_loaded_or_refused_never_crash(format_name, tmp_path):
    extension = one_extension_per_format()[format_name]
    seed_file = tmp_path / f"seed{extension}"
    export(build_spans(seed=3, roots_per_thread=1, longest_root_ns=1500), seed_file)
    data = seed_file.read_bytes()
    rng = random.Random(f"{SEED}-{format_name}")
    paths = []
    for i in range(PER_FORMAT):
        path = tmp_path / f"m{i:04d}{extension}"
        path.write_bytes(mutate(data, rng, gz=extension.endswith(".gz")))
        paths.append(path)
    env = dict(os.environ)
    outcomes, crashes = run_worker(paths, env)
    problems = [f"{paths[i].name}: crashed, {report}" for i, report in crashes]
    problems += [
        f"{paths[i].name}: {outcome}"
        for i, outcome in sorted(outcomes.items())
        if outcome.startswith("other")
    ]
    if problems:
        keep = Path(
            os.environ.get("HOTSPAN_FUZZ_KEEP", tmp_path)
        )  # the files stay in tmp_path to replay
        raise AssertionError(
            f"{len(problems)} of {len(paths)} mutated {format_name} files (kept in {keep}):\n"
            + "\n".join(problems[:20])
        )
    counts = {
        kind: sum(1 for o in outcomes.values() if o == kind)
        for kind in ("ok", "refused", "oserror")
    }
    assert sum(counts.values()) == len(paths), counts
    assert counts["refused"] > 0, counts  # the mutations do break files


# --------------------------------------------------------------------------- no silent row loss

#: Deletion mutations a format (cut at a unit's end, a unit cut out, cut anywhere).
PER_FORMAT_DELETIONS = int(os.environ.get("HOTSPAN_FUZZ_DELETIONS", "150"))


def _packets(data: bytes) -> list[bytes]:
    """A Perfetto trace's top-level packets (field 1 of Trace, length-delimited), whole."""
    out, at = [], 0
    while at < len(data):
        end, length, shift = at + 1, 0, 0
        while True:
            byte = data[end]
            end += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        out.append(data[at : end + length])
        at = end + length
    return out


def _said(table) -> int:
    import json

    from hotspan._schema import META_SKIPPED_ON_LOAD

    return json.loads((table.schema.metadata or {}).get(META_SKIPPED_ON_LOAD) or b"{}").get(
        "total", 0
    )


def _newlines_outside_quotes(text: bytes):
    """(offset, quotes before it) of each newline of a CSV file that ends a row."""
    quotes = 0
    for i, byte in enumerate(text):
        if byte == 0x22:  # '"'; an escaped quote is two, so the parity stays right
            quotes += 1
        elif byte == 0x0A and quotes % 2 == 0:
            yield i, quotes


def _reasons(table) -> dict[str, int]:
    import json

    from hotspan._schema import META_SKIPPED_ON_LOAD

    return json.loads((table.schema.metadata or {}).get(META_SKIPPED_ON_LOAD) or b"{}").get(
        "reasons", {}
    )


@pytest.mark.slow
@pytest.mark.parametrize("extension", [".json", ".json.gz", ".pftrace", ".jsonl", ".csv"])
def test_rows_cut_out_are_said_never_lost_silently(extension, tmp_path):
    """Files cut at a line's (a packet's) end, with a line (a packet) cut out, or cut
    anywhere: each load is refused, or its rows plus the rows it says it left out
    (``hotspan.skipped_on_load``) are the rows written. CSV cannot say how many rows it
    holds: there only rows that other rows name as their parent are counted when missing,
    so the CSV case cuts out rows that are parents (each said exactly), and cuts anywhere,
    where every whole row before the cut loads and the row cut mid-way is said, but the
    rows after it only through their children (the totals printed count the others as lost
    silently). Never more said than left out, in any format."""
    import warnings

    import pyarrow as pa
    import pyarrow.compute as pc

    from hotspan.formats import TraceFileError, load

    table = build_spans(seed=3, roots_per_thread=1, longest_root_ns=1500)
    seed_file = tmp_path / f"seed{extension}"
    export(table, seed_file)
    raw = seed_file.read_bytes()
    gz = extension.endswith(".gz")
    text = gzip.decompress(raw) if gz else raw
    units = _packets(text) if extension == ".pftrace" else text.splitlines(keepends=True)
    parents = set(pc.unique(table.column("parent_id").drop_null()).to_pylist())
    parent_rows = [
        i for i, span_id in enumerate(table.column("span_id").to_pylist()) if span_id in parents
    ]
    # Where each CSV row ends: a newline outside quotes (names hold newlines), header left out
    row_ends = [i for i, _quotes in _newlines_outside_quotes(text)][1:]
    rng = random.Random(f"{SEED}-deletions-{extension}")
    totals = {"files": 0, "refused": 0, "rows_said": 0, "rows_lost_silently": 0}
    problems = []
    for i in range(PER_FORMAT_DELETIONS):
        kind = rng.choice(["cut_unit", "delete_unit", "cut_any"])
        if extension == ".csv" and kind != "cut_any":  # a row some row names as parent, cut out
            k = rng.choice(parent_rows)
            cut = tmp_path / "cut.csv"
            export(pa.concat_tables([table.slice(0, k), table.slice(k + 1)]), cut)
            body, kind = cut.read_bytes(), "delete_parent_row"
        elif kind == "cut_unit":
            body = b"".join(units[: rng.randrange(1, len(units))])
        elif kind == "delete_unit":
            k = rng.randrange(len(units))
            body = b"".join(units[:k] + units[k + 1 :])
        else:
            body = text[: rng.randrange(1, len(text))]
        path = tmp_path / f"d{i:04d}{extension}"
        path.write_bytes(gzip.compress(body, mtime=0) if gz else body)
        totals["files"] += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = load(path)
        except TraceFileError:
            totals["refused"] += 1
            totals["rows_said"] += table.num_rows
            continue
        said = _said(got)
        totals["rows_said"] += said
        lost = table.num_rows - got.num_rows - said
        if lost > 0:
            totals["rows_lost_silently"] += lost
        loaded_said = f"{got.num_rows} loaded + {said} said of {table.num_rows}"
        if lost < 0:  # more said than left out: a row counted twice, or a made-up one
            problems.append(f"{path.name} ({kind}): {loaded_said}")
        elif extension == ".csv" and kind == "cut_any":
            # As strict as CSV allows: every whole row before the cut loaded, the row the
            # cut ends inside said; the rows after it are said only where a loaded row
            # names one as its parent (no row count to check them against).
            whole_rows = sum(1 for end in row_ends if end < len(body))
            cut_rows = _reasons(got).get(INCOMPLETE_LAST_ROW, 0)
            if got.num_rows != whole_rows or cut_rows != (not body.endswith(b"\n")):
                problems.append(
                    f"{path.name} ({kind}): {loaded_said}; {whole_rows} whole rows before "
                    f"the cut, {cut_rows} said cut mid-row"
                )
        elif lost > 0:
            problems.append(f"{path.name} ({kind}): {loaded_said}")
    print(f"{extension}: {totals}")
    assert not problems, "\n".join(problems[:20])
