"""The runs under a directory: every trace file (any format hotspan reads) and every
dataset directory (``part-r<R>-*.parquet``, or the older ``rank=R/part-*.parquet``, as ``hotspan.record("dir/")`` and
``hotspan collect`` write them), found anywhere below it.

A scan walks the directory again (runs that appear later show up without a restart), but
what it knows of a run is kept while the run's files keep their sizes and modification
times: a scan of an unchanged tree reads no trace, only ``stat``\\ s its files.

Every run ends up as Parquet, which the queries scan with ``pyarrow.dataset`` in batches
(never the whole run at once): a Parquet file is used where it is, a dataset's parts where
they are, and a trace in another format is converted once to a Parquet file in the cache
directory (kept while the trace is unchanged).

A run's id is a hash of its path relative to the directory: stable across restarts and
scans, and no path ever travels in a URL.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ..formats.dataset import (
    RANK_DIR_RE as _RANK_DIR,  # one pattern for the layout, the loader's
)
from ..formats._registry import READABLE_EXTENSIONS, format_of

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["HEAVY", "Catalog", "Run", "RunError"]

T = TypeVar("T")

#: One heavy computation at a time (statistics, phases, comparisons, timelines, format
#: conversions): each may read a whole run, so the server's memory is that of one of them
#: however many requests arrive together; a request for a result being computed waits for
#: it instead of computing it again.
HEAVY = threading.Lock()


class RunError(Exception):
    """A run that cannot be read (a corrupt or foreign file): listed with this message."""


class _Vanished(Exception):
    """A file of a run was deleted between its listing and its reading (a compaction's input)."""


#: How long before a listing a dataset's directories must have last changed for the listing
#: to be reused while they stay unchanged (file systems keep times in coarse ticks).
_SETTLED_NS = 2_000_000_000

#: A directory of more runs than this is listed within about ``LIST_BUDGET_S`` seconds (the
#: walk included): the runs not summarised by then are listed by their paths and summarised
#: in the background.
LISTED_WHOLE = 200
LIST_BUDGET_S = 0.6

#: How many listings a run gets when its files keep vanishing as they are read.
VANISHED_ATTEMPTS = 8


@dataclass
class Run:
    id: str
    path: (
        str  # relative to the served directory, with "/" separators ("." for the directory itself)
    )
    location: Path  # absolute
    kind: str  # "file" or "dataset"
    format: str  # the extension (".parquet", ".json.gz", ...) or "dataset"
    #: The run's files with their sizes and modification times when it was last summarised
    #: (None: never yet); the version every cached answer is keyed by.
    signature: tuple[tuple[str, int, int], ...] | None = None
    #: The Parquet files that hold the run, each with the rank its directory names (or None).
    parts: list[tuple[Path, int | None]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    error: str | None = None
    #: A file of the run resolves outside the served directory (a link out of it, made
    #: perhaps after the run was first listed): the run is not listed, and its id is a 404.
    outside: bool = False
    #: Listed before being summarised (a large directory): its summary is on its way.
    pending: bool = False

    @property
    def source(self) -> Path:
        """The path the library reads the run from: the dataset directory, the Parquet file,
        or the Parquet copy of a trace in another format."""
        if self.kind == "dataset":
            return self.location
        return self.parts[0][0] if self.parts else self.location

    @property
    def name(self) -> str:
        return self.location.name if self.path != "." else self.location.name or self.path

    @property
    def title(self) -> str:
        """What a page calls the run: its path, or for the served directory itself (a
        dataset served as ``hotspan serve run/``) the directory's own name, not "."."""
        return self.path if self.path != "." else self.name

    def entry(self) -> dict[str, Any]:
        """The run as ``GET /v1/traces`` lists it."""
        out: dict[str, Any] = {
            "id": self.id,
            "path": self.path,
            "name": self.name,
            "title": self.title,
            "kind": self.kind,
            "format": self.format,
            "error": self.error,
            "pending": self.pending and self.summary is None and self.error is None,
        }
        keys = ("ranks", "spans", "start", "start_ns", "duration_ns", "host", "command", "modified")
        summary = self.summary or {}
        out.update({k: summary.get(k) for k in keys})
        return out


def run_id(relative: str) -> str:
    """A run's id: the first 16 hex digits of the SHA-256 of its relative path."""
    return hashlib.sha256(relative.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path``, links resolved, lies within ``root`` (a link out of it is ignored).

    ``root`` is resolved already: a path below it none of whose components below ``root``
    is a link lies within it, told by one ``lstat`` a component (the common case, once per
    file at every listing); only a path through a link is resolved whole."""
    text, base = os.fspath(path), os.fspath(root)
    if text.startswith(base + os.sep):
        current = base
        try:
            for piece in text[len(base) + 1 :].split(os.sep):
                current = os.path.join(current, piece)
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    break
            else:
                return True
        except OSError:
            return False
    try:
        return Path(os.path.realpath(path)).is_relative_to(root)
    except OSError:
        return False


def _regular(path: Path) -> bool:
    """Whether ``path`` (links followed) is a regular file: a FIFO, socket or device named
    like a trace is no run (opening a FIFO would block the request that reads it)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


#: Folders never entered: they hold installed packages, not runs.
SKIPPED_DIRECTORIES = frozenset(
    {"site-packages", "dist-packages", "node_modules", "bower_components", "__pycache__"}
)
#: A folder holding one of these is an environment (a venv's pyvenv.cfg, a conda
#: environment's conda-meta/): nothing below it is entered.
ENVIRONMENT_MARKERS = ("pyvenv.cfg", "conda-meta")


def _skipped_directory(name: str) -> bool:
    """Whether the folder ``name`` is left out of the walk: hidden (``.git``, ``.venv``) or
    private (``_build``), or a folder of installed packages. (An environment is told by its
    marker, seen as the walk lists it: nothing below it is listed.)"""
    return name.startswith((".", "_")) or name.lower() in SKIPPED_DIRECTORIES


#: Bytes of a JSON or CSV file read to tell a trace from another file.
SNIFF_BYTES = 256 * 1024
#: Columns only a span table has, one of which a trace's table (or CSV/JSONL header) names.
_SPAN_MARKS = ("span_id", "start_ns")


def looks_like_trace(path: Path) -> bool:
    """Whether a file named like a trace is one, decided cheaply: from its name, its magic
    bytes and its head (never parsed whole). A trace that is damaged still answers True (the
    list shows it with what is wrong); a file that merely shares an extension with a trace
    format (a package's ``package.json``, a data CSV, a pandas Parquet file) answers False.

    - ``.pftrace``, ``.perfetto-trace``: always (no other files are named so);
    - ``.parquet``, ``.arrow``, ``.feather``: a schema whose columns or metadata are a span
      table's (``span_id``, or ``start_ns`` and ``end_ns``, or hotspan's metadata), read from
      the footer; a file without the format's magic, or whose footer cannot be read, is a
      damaged trace;
    - ``.json``, ``.json.gz``: JSON whose head holds ``"traceEvents"`` (the object form) or
      ``"ph"`` (the array form of the Chrome trace format);
    - ``.csv``, ``.jsonl``: a first line naming the span columns."""
    fmt = format_of(path.name)
    if fmt in (".pftrace", ".perfetto-trace"):
        return True
    try:
        if fmt in (".parquet", ".arrow", ".feather"):
            return _columnar_trace(path, fmt)
        if fmt in (".json", ".json.gz"):
            return _json_trace(_head(path, SNIFF_BYTES))
        if fmt in (".csv", ".jsonl"):
            line = _head(path, 64 * 1024).split(b"\n", 1)[0]
            return all(mark.encode() in line for mark in _SPAN_MARKS)
    except OSError:
        return True  # unreadable now: listed, and the row says why
    return False


def _head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of the file, inflated when it is gzip (a ``.json.gz``)."""
    import gzip
    import zlib

    with open(path, "rb") as f:
        head = f.read(size)
        if head[:2] != b"\x1f\x8b":
            return head
        f.seek(0)
        try:
            with gzip.GzipFile(fileobj=f) as inflated:
                return inflated.read(size)
        except (EOFError, zlib.error, gzip.BadGzipFile):
            return b'"traceEvents"'  # a gzip stream cut short: a damaged trace, listed


def _json_trace(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"{":
        return b'"traceEvents"' in text
    if text[:1] == b"[":
        return b'"ph"' in text or len(text.rstrip()) <= 1  # an event array (maybe empty)
    return False


def _columnar_trace(path: Path, fmt: str) -> bool:
    with open(path, "rb") as f:
        magic = f.read(6)
    if fmt == ".parquet" and magic[:4] != b"PAR1":
        return True  # named as Parquet, not Parquet (yet): a damaged or unfinished trace
    if fmt != ".parquet" and magic != b"ARROW1":
        return True
    try:
        if fmt == ".parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
        else:
            import pyarrow as pa

            with pa.memory_map(str(path), "r") as source:
                schema = pa.ipc.open_file(source).schema
    except Exception:  # noqa: BLE001 -- a torn footer: a damaged trace, listed with its error
        return True
    names = set(schema.names)
    meta = schema.metadata or {}
    return (
        "span_id" in names
        or {"start_ns", "end_ns"} <= names
        or any(key.startswith(b"hotspan.") for key in meta)
    )


def _is_dataset(dirnames: list[str], filenames: list[str]) -> bool:
    return any(_RANK_DIR.match(d) for d in dirnames) or any(
        n.startswith("part-") and n.endswith(".parquet") for n in filenames
    )


def _signature(paths: list[Path]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for p in paths:
        st = p.stat()
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


class Catalog:
    """The runs under ``root``; ``cache`` holds the Parquet copies of non-Parquet traces."""

    def __init__(self, root: str | os.PathLike[str], cache: str | os.PathLike[str]):
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise NotADirectoryError(f"{root}: not a directory")
        self.cache = Path(cache)
        self.cache.mkdir(parents=True, exist_ok=True)
        self._runs: dict[str, Run] = {}
        #: Per file seen by the last walk: (size, mtime, whether it is a trace).
        self._sniffed: dict[str, tuple[int, int, bool]] = {}
        #: Per dataset directory the last walk found: its rank=R directories.
        self._rank_dirs: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.Lock] = {}
        #: Per dataset run: its parts' footers, by path (``formats.dataset.current_parts``).
        self._footers: dict[str, dict[str, Any]] = {}
        #: Runs listed before being summarised (a large directory), and who summarises them.
        self._later: dict[str, Run] = {}
        self._summariser: threading.Thread | None = None
        #: Per dataset run: (its directories' modification times, its files) when listed.
        self._listings: dict[str, tuple[tuple[tuple[str, int], ...], list[Path]]] = {}
        #: Called with each run whose files are new or changed, once summarised (the server
        #: computes the statistics of the runs it finds ahead of the first request for them:
        #: see ``queries.Warmer``).
        self.on_new_version: Callable[[Run], None] | None = None

    # ------------------------------------------------------------------ discovery

    def _walk(self) -> list[tuple[str, Path, str]]:
        found: list[tuple[str, Path, str]] = []
        seen: dict[str, tuple[int, int, bool]] = {}
        walked: dict[str, list[str]] = {}
        for dirpath, dirnames, filenames in os.walk(
            self.root
        ):  # links to directories are not followed
            here = Path(dirpath)
            # Folders that hold no runs are never entered (a venv's site-packages holds
            # thousands of JSON files, none of them a trace).
            if here != self.root and any(
                marker in filenames or marker in dirnames for marker in ENVIRONMENT_MARKERS
            ):
                dirnames[:] = []  # an environment (a venv, a conda env): nothing below it
                continue
            dirnames[:] = sorted(d for d in dirnames if not _skipped_directory(d))
            if _is_dataset(dirnames, filenames):
                found.append((here.relative_to(self.root).as_posix(), here, "dataset"))
                walked[dirpath] = [d for d in dirnames if _RANK_DIR.match(d)]
                # Its parts (here and in its rank=R directories) are the run, not runs of
                # their own; other directories below it hold runs of their own (an empty
                # rank=0/ in the served directory hides none of them).
                dirnames[:] = [d for d in dirnames if not _RANK_DIR.match(d)]
                continue
            for name in sorted(filenames):
                # Export-only views (.folded, .speedscope.json) hold no spans: not runs.
                if name.startswith((".", "_")) or format_of(name) not in READABLE_EXTENSIONS:
                    continue
                path = here / name
                if _inside(path, self.root) and _regular(path) and self._trace_file(path, seen):
                    found.append((path.relative_to(self.root).as_posix(), path, "file"))
        self._sniffed = seen  # files gone since the last walk are forgotten
        self._rank_dirs = walked
        return found

    def _trace_file(self, path: Path, seen: dict[str, tuple[int, int, bool]]) -> bool:
        """Whether the file is a trace (``looks_like_trace``), asked again only when its size
        or modification time changed since the last walk."""
        key = str(path)
        try:
            st = os.stat(path)
        except OSError:
            return False
        old = self._sniffed.get(key)
        if old is not None and old[:2] == (st.st_size, st.st_mtime_ns):
            verdict = old[2]
        else:
            verdict = looks_like_trace(path)
        seen[key] = (st.st_size, st.st_mtime_ns, verdict)
        return verdict

    def scan(self) -> list[Run]:
        """Walk the directory again; runs whose files changed are summarised afresh."""
        began = time.monotonic()
        found = self._walk()
        with self._lock:
            runs: dict[str, Run] = {}
            for relative, path, kind in found:
                rid = run_id(relative)
                old = self._runs.get(rid)
                run = (
                    old
                    if old is not None and old.location == path
                    else Run(
                        rid,
                        relative,
                        path,
                        kind,
                        "dataset" if kind == "dataset" else (format_of(path.name) or ""),
                    )
                )
                runs[rid] = run
            self._runs = runs
        # A large directory is listed within LIST_BUDGET_S: the runs not summarised by then
        # are listed as they are (path, kind) and summarised on a thread of its own.
        deadline = began + LIST_BUDGET_S if len(runs) > LISTED_WHOLE else None
        later = []
        for run in runs.values():
            if deadline is not None and run.signature is None and time.monotonic() > deadline:
                later.append(run)
                continue
            self.refresh(run)
        if later:
            self._summarise_later(later)
        return sorted((r for r in runs.values() if not r.outside), key=lambda r: r.path)

    def _summarise_later(self, runs: list[Run]) -> None:
        """Summarise ``runs`` on the catalog's background thread (one at a time: a thread
        already at work takes them on too); each is listed with ``pending`` until then."""
        with self._lock:
            for run in runs:
                run.pending = True
            self._later.update((run.id, run) for run in runs)
            if self._summariser is not None and self._summariser.is_alive():
                return
            self._summariser = threading.Thread(
                target=self._summarise_pending, name="hotspan-serve-summaries", daemon=True
            )
            self._summariser.start()

    def _summarise_pending(self) -> None:
        while True:
            with self._lock:
                if not self._later:
                    return
                _rid, run = self._later.popitem()
            try:
                self.refresh(run)
            except Exception:  # noqa: BLE001 -- the run's own request reports it
                pass
            finally:
                run.pending = False

    def get(self, rid: str) -> Run | None:
        """The run of id ``rid`` (scanning again when it is not known yet), refreshed; None
        for an unknown id and for a run with a file outside the directory."""
        with self._lock:
            run = self._runs.get(rid)
        if run is None or not run.location.exists():
            self.scan()
            with self._lock:
                run = self._runs.get(rid)
        else:
            self.refresh(run)
        return None if run is None or run.outside else run

    # ------------------------------------------------------------------ summaries

    def _run_lock(self, rid: str) -> threading.Lock:
        with self._lock:
            return self._run_locks.setdefault(rid, threading.Lock())

    def refresh(self, run: Run) -> None:
        """Summarise ``run`` unless its files are as they were when it last was.

        A dataset's files are its current parts (those a compacted part replaces left out:
        ``formats.dataset.current_parts``), so that a run being compacted reads as one
        consistent set of parts, before or after each merge; a part that vanishes between the
        listing and its reading (a compaction deleting the inputs it replaced) has the run
        listed again."""
        for _attempt in range(VANISHED_ATTEMPTS):
            try:
                self._refresh_once(run)
                return
            except _Vanished:
                time.sleep(0.01)
        with self._run_lock(run.id):
            run.signature, run.summary, run.parts = None, None, []
            run.error = "its parts kept vanishing while being read: is something deleting them?"

    def steady(self, runs: list[Run], compute: Callable[[], T]) -> T:
        """``compute()`` (an answer read from ``runs``' files), computed again when it failed
        because a run changed under it: a part it read was deleted meanwhile (a compaction's
        input, replaced by the merged part), so the answer comes from the run's new version,
        one consistent set of parts, instead of a 409. Any other failure is raised as it is."""
        for attempt in range(VANISHED_ATTEMPTS):
            before = [run.signature for run in runs]
            try:
                return compute()
            except Exception:
                if attempt == VANISHED_ATTEMPTS - 1:
                    raise
                for run in runs:
                    self.refresh(run)
                if [run.signature for run in runs] == before or any(
                    run.error is not None for run in runs
                ):
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def _files(self, run: Run) -> list[Path]:
        """The files the run reads now: a dataset's current parts, or the trace file.

        A dataset's parts are listed again only when its directory or one of its ``rank=R``
        directories changed (their modification times), and trusted from the last listing
        only when those changed more than ``_SETTLED_NS`` before it (a part added within the
        same clock tick as a listing leaves the times as they were)."""
        if run.kind != "dataset":
            return [run.location]
        from ..formats.dataset import current_parts

        listed_at = time.time_ns()
        try:
            directories = self._dataset_directories(
                run.location, self._rank_dirs.get(str(run.location))
            )
        except OSError:
            directories = None
        known = self._listings.get(run.id)
        if directories is not None and known is not None and known[0] == directories:
            return known[1]
        # each part's footer read once (parts are never written over), not at every scan
        footers = self._footers.setdefault(run.id, {})
        _loc, parts = current_parts(run.location, own=True, footers=footers)
        files = [Path(path) for path, _size, _meta in parts]
        if directories is not None and all(
            mtime < listed_at - _SETTLED_NS for _name, mtime in directories
        ):
            self._listings[run.id] = (directories, files)
        else:
            self._listings.pop(run.id, None)
        return files

    @staticmethod
    def _dataset_directories(
        location: Path, rank_dirs: list[str] | None
    ) -> tuple[tuple[str, int], ...]:
        """The dataset directory and its ``rank=R`` directories (``rank_dirs``, as the walk
        found them, else listed), each with its modification time: what changes when a part
        is added, renamed or removed (a ``rank=R`` directory added changes the dataset's)."""
        out = [("", os.stat(location).st_mtime_ns)]
        if rank_dirs is None:
            with os.scandir(location) as entries:
                rank_dirs = [
                    e.name
                    for e in entries
                    if _RANK_DIR.match(e.name) and e.is_dir(follow_symlinks=False)
                ]
        for name in rank_dirs:
            out.append((name, os.lstat(os.path.join(location, name)).st_mtime_ns))
        return tuple(sorted(out))

    def _refresh_once(self, run: Run) -> None:
        from ..formats._base import TraceFileError, require_regular_file

        with self._run_lock(run.id):
            try:
                files = self._files(run)
                # Every file the run reads, links resolved, lies inside the directory: a
                # rank=R directory or a part linked out of it hides the run (never served).
                run.outside = not all(_inside(f, self.root) for f in (run.location, *files))
                if run.outside:
                    run.signature, run.summary, run.error, run.parts = (), None, None, []
                    return
                for f in files:  # a FIFO swapped in since the scan: refused, never opened
                    require_regular_file(f)
                signature = _signature(files)
            except FileNotFoundError:
                if run.kind == "dataset" and run.location.is_dir():
                    raise _Vanished() from None  # a part gone since the listing: list again
                run.signature, run.summary, run.parts = (), None, []
                run.error = "no such file or directory (removed since it was listed)"
                return
            except (
                TraceFileError
            ) as exc:  # a part that is not a regular file (a FIFO): never opened
                text = str(exc).replace(
                    str(self.root) + os.sep, ""
                )  # paths relative to the directory
                run.signature, run.summary, run.error, run.parts = (), None, text, []
                return
            except OSError as exc:
                run.signature, run.summary, run.error, run.parts = (
                    (),
                    None,
                    f"{exc.strerror or exc}",
                    [],
                )
                return
            if signature == run.signature:
                return
            try:
                parts = self._parts(run, files, signature)
                summary = summarize(parts, signature)
            except RunError as exc:
                run.signature = signature
                run.parts, run.summary, run.error = [], None, str(exc)
                return
            except _Vanished:
                if run.kind == "dataset":
                    raise
                run.signature, run.summary, run.parts = (), None, []
                run.error = "no such file or directory (removed since it was listed)"
                return
            # One assignment after another, each reader taking the list it finds: a request
            # reads the parts of one version (run.parts is never changed in place).
            run.signature, run.parts, run.summary, run.error = signature, parts, summary, None
        if self.on_new_version is not None:
            self.on_new_version(run)

    def _parts(
        self, run: Run, files: list[Path], signature: tuple[tuple[str, int, int], ...]
    ) -> list[tuple[Path, int | None]]:
        if run.kind == "dataset":
            if not files:
                raise RunError(
                    "an empty dataset: no span parts in this directory yet "
                    "(expected part-*.parquet, here or in its rank=R directories)"
                )
            parts = []
            for f in files:
                match = _RANK_DIR.match(f.parent.name)
                parts.append((f, int(match.group(1)) if match else None))
            known = self._footers.get(run.id, {})
            return _newest_run(parts, {path: entry[1] for path, entry in known.items()})
        if run.format == ".parquet":
            return [(run.location, None)]
        return [(self._converted(run, signature), None)]

    def _converted(self, run: Run, signature: tuple[tuple[str, int, int], ...]) -> Path:
        """The Parquet copy of a trace in another format, made once per version of it."""
        digest = hashlib.sha256(repr(signature).encode()).hexdigest()[:16]
        target = self.cache / f"{run.id}-{digest}.parquet"
        with HEAVY:
            if not target.exists():
                self._convert(run, target)
        return target

    def _convert(self, run: Run, target: Path) -> None:
        from ..formats import export, load

        try:
            table = load(run.location)
        except (ValueError, OSError) as exc:  # TraceFileError names the file and the problem
            raise RunError(_message(exc, run.location)) from None
        except Exception as exc:  # noqa: BLE001 -- a foreign file a reader chokes on: an error entry, never a 500
            raise RunError(f"not a readable trace: {type(exc).__name__}: {exc}") from None
        for stale in self.cache.glob(f"{run.id}-*.parquet"):
            stale.unlink(missing_ok=True)
        export(table, target)


def _message(exc: BaseException, path: Path) -> str:
    text = str(exc)
    return text.replace(str(path), os.path.basename(path)) if str(path) in text else text


def _newest_run(
    parts: list[tuple[Path, int | None]], footers: dict[str, Any]
) -> list[tuple[Path, int | None]]:
    """A directory holding several runs serves the run the library reads (its newest:
    ``parts_of_run``), so the list, the pages and the statistics count the same spans.
    ``footers``: the parts' metadata already read, by path (the others are read)."""
    import warnings

    import pyarrow.parquet as pq

    from ..formats.dataset import SeveralRunsWarning, parts_of_run

    def metadata(path: Path) -> dict[bytes, bytes]:
        known = footers.get(str(path))
        return dict(known if known is not None else (pq.read_schema(path).metadata or {}))

    try:
        metas = {path: metadata(path) for path, _rank in parts}
    except Exception:  # noqa: BLE001 -- a torn part: summarize() names it
        return parts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeveralRunsWarning)  # the server's log: once per read
        return parts_of_run(parts, lambda part: metas[part[0]], None, "")


def summarize(
    parts: list[tuple[Path, int | None]], signature: tuple[tuple[str, int, int], ...]
) -> dict[str, Any]:
    """What the run list shows: spans, ranks, start and duration, host and command, from the
    Parquet footers (row counts, column statistics, metadata); a column is scanned only
    where the statistics do not tell."""
    import pyarrow.parquet as pq

    from .._schema import META_ARGV, META_HOST, META_START
    from ..formats.dataset import merge_metadata

    metas, spans, ranks = [], 0, set()
    start = end = None
    try:
        for path, rank in parts:
            pf = pq.ParquetFile(path)
            _check_schema(pf.schema_arrow, path, has_rank=rank is not None)
            meta = pf.metadata
            schema = pf.schema_arrow
            metas.append((dict(schema.metadata or {}), meta.num_rows))
            spans += meta.num_rows
            if meta.num_rows == 0:
                continue
            names = schema.names
            lo = _column_bound(pf, "start_ns", min)
            hi = _column_bound(pf, "end_ns", max)
            start = lo if start is None else min(start, lo)
            end = hi if end is None else max(end, hi)
            stamped = _part_rank(schema.metadata)
            if "rank" in names and stamped is not None and _column_unstated(pf, "rank"):
                ranks.add(stamped)  # the part writer's word: one rank a part
            elif "rank" in names:
                ranks.update(_column_values(pf, "rank"))
            else:  # checked above: a dataset part whose rank=R directory gives it
                assert rank is not None  # _check_schema refused a part with no rank at all
                ranks.add(rank)
    except RunError:
        raise
    except Exception as exc:  # noqa: BLE001 -- pyarrow's errors for a torn or foreign file
        if not all(os.path.exists(path) for path, _rank in parts):
            raise _Vanished() from exc  # deleted since the listing: not the file's fault
        raise RunError(f"not a readable span table: {type(exc).__name__}: {exc}") from None
    merged = merge_metadata(metas) if len(metas) > 1 else (metas[0][0] if metas else {})

    def text(key: bytes) -> str | None:
        value = merged.get(key)
        return value.decode("utf-8", "replace") if value else None

    command = None
    argv = text(META_ARGV)
    if argv:
        try:
            command = " ".join(map(str, json.loads(argv)))
        except (ValueError, TypeError):
            command = argv
    recorded = text(META_START)
    start_ns = (
        start if start is not None else (int(recorded) if recorded and recorded.isdigit() else None)
    )
    modified = max((m for _p, _s, m in signature), default=None)
    return {
        "spans": spans,
        "ranks": sorted(ranks),
        "start_ns": start_ns,
        "start": _iso(start_ns),
        "duration_ns": (end - start) if start is not None and end is not None else 0,
        "host": text(META_HOST),
        "command": command,
        "modified": _iso(modified),
    }


def _part_rank(metadata: dict[bytes, bytes] | None) -> int | None:
    """The rank a dataset part's writer stamped in its footer (``hotspan.part``), or None."""
    from ..formats.dataset import META_PART

    raw = (metadata or {}).get(META_PART)
    if not raw:
        return None
    try:
        rank = json.loads(raw).get("rank")
    except (ValueError, AttributeError):
        return None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _column_unstated(pf: pq.ParquetFile, column: str) -> bool:
    """Whether some row group of the column lacks min/max statistics (so that its values
    would have to be scanned)."""
    meta = pf.metadata
    index = pf.schema_arrow.get_field_index(column)
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max:
            return True
    return False


#: Schemas found to be span tables (``_check_schema``), by their columns and types: the
#: parts of thousands of runs share a few schemas.
_CHECKED: set[tuple[Any, ...]] = set()


def _check_schema(schema: pa.Schema, path: Path, *, has_rank: bool) -> None:
    key = (tuple(zip(schema.names, map(str, schema.types))), has_rank)
    if key in _CHECKED:
        return
    _check_schema_once(schema, path, has_rank=has_rank)
    if len(_CHECKED) < 1024:
        _CHECKED.add(key)


def _check_schema_once(schema: pa.Schema, path: Path, *, has_rank: bool) -> None:
    """Refuse a Parquet file that is not a span table (a foreign file under the directory):
    every column of the span schema (``rank`` may come from a ``rank=R`` directory), strings
    where strings belong, integers and booleans where they do; so that every query on it
    answers, and a foreign file is an error entry."""
    import pyarrow as pa

    from .._schema import SPAN_SCHEMA
    from ..formats._base import check_span_table

    present = dict(zip(schema.names, schema.types))
    if has_rank and "rank" not in present:
        present["rank"] = pa.int32()
    try:
        check_span_table(pa.schema(list(present.items())).empty_table())
    except ValueError as exc:
        raise RunError(f"{path.name}: {exc}") from None
    for column in SPAN_SCHEMA:
        # A derived column (self_ns, wait_ns) may be absent: parts written before it joined
        # the schema; check_span_table accepted that and readers compute it.
        kind = present.get(column.name)
        if kind is None:
            continue
        if pa.types.is_integer(column.type) and not pa.types.is_integer(kind):
            raise RunError(
                f"{path.name}: not a span table: column {column.name!r} holds {kind}, not integers"
            )
        if pa.types.is_boolean(column.type) and not pa.types.is_boolean(kind):
            raise RunError(
                f"{path.name}: not a span table: column {column.name!r} holds {kind}, not booleans"
            )


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _column_bound(pf: pq.ParquetFile, column: str, pick: Callable[..., Any]) -> int:
    """The min or max of an integer column: from the row groups' statistics when every one
    has them (nothing read), else from a scan of that column alone."""
    meta = pf.metadata
    index = pf.schema_arrow.get_field_index(column)
    values: list[int] = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        stats = group.column(index).statistics if index < group.num_columns else None
        if stats is None or not stats.has_min_max:
            values = []  # a group without statistics: scan the column
            break
        values.append(stats.min if pick is min else stats.max)
    if values:
        return int(pick(values))
    import pyarrow.compute as pc

    found = None
    for batch in pf.iter_batches(columns=[column], batch_size=1 << 20):
        value = (pc.min if pick is min else pc.max)(batch.column(0)).as_py()
        if value is not None:
            found = value if found is None else pick(found, value)
    return int(found or 0)


def _column_values(pf: pq.ParquetFile, column: str) -> set[int]:
    """The distinct values of a small-cardinality integer column (``rank``): the statistics
    when a row group holds one value, else a scan of that column alone."""
    meta = pf.metadata
    index = pf.schema_arrow.get_field_index(column)
    out: set[int] = set()
    scan = False
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(index).statistics
        if stats is not None and stats.has_min_max and stats.min == stats.max:
            out.add(int(stats.min))
        elif group.num_rows:
            scan = True
    if scan:
        import pyarrow.compute as pc

        for batch in pf.iter_batches(columns=[column], batch_size=1 << 20):
            out.update(v for v in pc.unique(batch.column(0)).to_pylist() if v is not None)
    return out
