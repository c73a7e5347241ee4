"""Chrome trace event format (JSON, object form), as Perfetto UI and chrome://tracing read it.

What the file holds:

* ``otherData``: the format marker, the absolute trace start (``hotspan.trace_start_ns``),
  the table's schema metadata, and the line layout described below;
* ``M`` events naming each process (``rank N @ host``) and thread (the table's thread
  names); their args keep the real pid, rank and thread id, because the event ``pid``/``tid``
  must fit in uint32 for Perfetto and are renumbered when they do not;
* one ``X`` event a span, one ``i`` event (thread scope) an instant (``duration_ns == 0``),
  per thread in start order, parent before child. ``ts`` is rebased to the trace start so
  nanoseconds survive (microseconds with three decimals); ``cat`` is the category path;
  ``args`` carry ``span_id``, ``parent_id``, ``depth``, ``arg`` and ``error`` (and
  ``thread_name`` for the rare span whose thread was renamed mid-trace).

Speed. Events are built batch by batch without per-row Python: every event is one line,
its numbers first, each right-aligned in a fixed width (JSON allows the blanks), then the
strings (``ph``, ``name``, ``cat``), which come from a small set of distinct suffixes. The
fixed widths let the numbers be formatted as a byte matrix, and read back the same way:
:func:`read` recognises its own layout (listed in ``otherData``), checks every line
against it and parses the columns with numpy; anything else (foreign files, or our own
edited by hand) goes through the general parser, which accepts what other tools write:
object or array form, gzip, ``X`` events and ``B``/``E`` pairs, instants, ``M`` thread
names, ``args.rank`` as the rank; ``parent_id`` and ``depth`` are rebuilt from the nesting
on each thread and span ids are assigned.
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._schema import SPAN_SCHEMA
from .base import Exporter, Progress, TraceFileError
from ._spans import UINT32_MAX, Batch, TraceLayout

FORMAT_MARK = "hotspan-chrome-json/1"
_GZIP_MAGIC = b"\x1f\x8b"
_READ_CHUNK = 16 << 20

# The numeric fields of an event line, in order, and the text before each.
_LINE_FIELDS = (
    ("ts", '{"ts":'),
    ("dur", ',"dur":'),
    ("pid", ',"pid":'),
    ("tid", ',"tid":'),
    ("span_id", ',"args":{"span_id":'),
    ("parent_id", ',"parent_id":'),
    ("depth", ',"depth":'),
    ("arg", ',"arg":'),
    ("error", ',"error":'),
)
_MICROSECOND_FIELDS = ("ts", "dur")
_NULLABLE_FIELDS = ("parent_id", "arg")
_LINE_START = _LINE_FIELDS[0][1].encode()


class _LineLayout:
    """Where each numeric field sits in an event line, given the fields' widths."""

    def __init__(self, widths: dict[str, int]):
        self.widths = {key: int(widths[key]) for key, _ in _LINE_FIELDS}
        template = bytearray()
        self.offsets = {}
        constant = []
        for key, text in _LINE_FIELDS:
            template += text.encode()
            constant += [True] * len(text)
            self.offsets[key] = len(template)
            template += b" " * self.widths[key]
            constant += [False] * self.widths[key]
        self.template = np.frombuffer(bytes(template), np.uint8)
        self.constant = np.array(constant, bool)
        self.constant_mask = np.where(self.constant, np.uint8(0xFF), np.uint8(0))
        self.width = len(template)
        self.numbers = _NumberFields(self)
        # The same checks in C, one pass a line (hotspan._native._scan_heads), when the
        # compiled core is there; the numpy parser above stays as its reference.
        kinds = {"ts": 2, "dur": 2, "span_id": 1, "parent_id": 1, "error": 3}
        self.scan_fields = tuple(
            (self.offsets[key], self.widths[key], kinds.get(key, 0), key in _NULLABLE_FIELDS)
            for key, _ in _LINE_FIELDS
        )
        self.scan_template = bytes(template)
        self.scan_mask = self.constant_mask.tobytes()

    def to_json(self) -> list:
        return [[key, self.widths[key]] for key, _ in _LINE_FIELDS]

    @classmethod
    def from_json(cls, value: Any) -> "_LineLayout | None":
        try:
            widths = {str(key): int(width) for key, width in value}
        except (TypeError, ValueError):
            return None
        if list(widths) != [key for key, _ in _LINE_FIELDS] or not all(0 < w < 40 for w in widths.values()):
            return None
        return cls(widths)


class _NumberFields:
    """Parses (and checks) every numeric field of a block of event lines at once.

    The fields sit at fixed columns of each line's head, right-aligned in blanks, so the
    checks are a few whole-matrix operations on the numeric columns (a per-field or
    per-row loop is what made this slow), and the values Horner's rule along the lines. A field must
    read as JSON writes it: blanks, an optional minus sign (not in ids), digits without a
    leading zero; ``ts`` and ``dur`` then ``.`` and exactly three digits (the value is read
    in thousandths); ``parent_id`` and ``arg`` may be ``null``; ``error`` is ``true`` or
    ``false``. Anything else: None, and the general reader takes the file.
    """

    # Up to 18 digits an int64 holds any value (wider: uint64 arithmetic, range checked).
    _EXACT_DIGITS = 18

    def __init__(self, line: "_LineLayout"):
        self.fields = [key for key, _ in _LINE_FIELDS if key != "error"]
        self.error = (line.offsets["error"], line.widths["error"])
        columns, field_of, int_part, first, int_last, point, fraction, unsigned = [], [], [], [], [], [], [], []
        self.valid = all(line.widths[key] >= 5 for key in _MICROSECOND_FIELDS)
        self.nullable = []  # (field index, columns of the trailing four characters in the submatrix)
        exponents = []
        for index, key in enumerate(self.fields):
            offset, width = line.offsets[key], line.widths[key]
            base = len(columns)
            decimal = key in _MICROSECOND_FIELDS
            integer_width = width - 4 if decimal else width
            for k in range(width):
                columns.append(offset + k)
                field_of.append(index)
                int_part.append(k < integer_width)
                first.append(k == 0)
                int_last.append(k == integer_width - 1)
                point.append(decimal and k == integer_width)
                fraction.append(decimal and k > integer_width)
                unsigned.append(key in ("span_id", "parent_id"))
                if decimal:
                    exponents.append(width - 2 - k if k < integer_width else (-1 if k == integer_width else width - 1 - k))
                else:
                    exponents.append(width - 1 - k)
            if key in _NULLABLE_FIELDS:
                self.nullable.append((index, key, np.arange(base + width - 4, base + width)))
        self.columns = np.array(columns, np.intp)
        self.field_of = np.array(field_of, np.intp)
        self.int_part = np.array(int_part, bool)
        self.first = np.array(first, bool)
        self.int_last = np.flatnonzero(int_last)
        self.point = np.flatnonzero(point)
        self.fraction = np.flatnonzero(fraction)
        self.unsigned = np.array(unsigned, bool)
        exponents = np.array(exponents, np.int64)
        self.exponents = exponents
        # Per field: exact in float64, or wide (read column by column in uint64).
        self.wide = [int(exponents[self.field_of == i].max()) >= self._EXACT_DIGITS for i in range(len(self.fields))]
        # Column k continues the integer part begun at column k - 1 (same field).
        self.continues = self.int_part & ~self.first

    def parse(self, matrix: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
        """(values, nulls) from the rows of ``matrix`` (line heads, one a row).

        The numeric columns are taken transposed (one row of the result per column of the
        lines), so that every operation runs along the lines, not along a short row.
        """
        if not self.valid:
            return None
        offset, width = self.error
        error_field = matrix[:, offset: offset + width]
        is_true = _columns_equal(error_field, b" true")
        if not (is_true | _columns_equal(error_field, b"false")).all():
            return None
        numbers = matrix.T[self.columns]  # (columns, lines), a copy
        nulls = {}
        for _, key, tail in self.nullable:
            null = numbers[tail[0]] == ord("n")
            for k, char in zip(tail[1:].tolist(), b"ull"):
                null &= numbers[k] == char
            nulls[key] = null
            if null.any():
                # Read as a right-aligned 0: the checks below then hold "null" to the same
                # rule as a number (blanks before it, nothing after).
                for k, char in zip(tail.tolist(), b"   0"):
                    numbers[k, null] = char
        digit_value = numbers - np.uint8(ord("0"))
        digit = digit_value <= 9
        blank = numbers == ord(" ")
        minus = numbers == ord("-")
        int_part = self.int_part[:, None]
        continues = self.continues[1:, None]
        # Integer parts: only blanks, minus signs and digits; ending with a digit.
        if ((~(digit | blank | minus)) & int_part).any() or not digit[self.int_last].all():
            return None
        # ts and dur: a point and three digits.
        if not (numbers[self.point] == ord(".")).all() or not digit[self.fraction].all():
            return None
        # No blank once the number began.
        if (blank[1:] & ~blank[:-1] & continues).any():
            return None
        has_minus = bool(minus.any())
        if has_minus:
            # A minus sign comes first (after blanks) and before a digit, never in an id.
            if (minus & self.unsigned[:, None]).any() or (minus[1:] & ~blank[:-1] & continues).any():
                return None
            if (minus[:-1] & ~digit[1:]).any():
                return None
        # No leading zero: a 0 that begins a number is its only integer digit.
        begins = np.empty_like(digit)
        begins[0] = True
        np.logical_or(~digit[:-1], self.first[1:, None], out=begins[1:])
        begins &= numbers == ord("0")
        begins &= int_part
        begins[self.int_last] = False
        if (begins[:-1] & digit[1:]).any():
            return None

        clean = np.where(digit, digit_value, np.uint8(0))
        values: dict[str, np.ndarray] = {}
        for index, key in enumerate(self.fields):
            columns = np.flatnonzero(self.field_of == index)
            negative = minus[columns].any(axis=0) if has_minus else None
            if self.wide[index]:
                value = self._wide(clean[columns].T, self.exponents[columns], negative,
                                   key in ("span_id", "parent_id"), numbers[columns].T)
                if value is None:
                    return None
            else:
                # Horner's rule along the lines (the point of ts/dur has no weight).
                value = np.zeros(numbers.shape[1], np.int64)
                for k in columns[self.exponents[columns] >= 0].tolist():
                    value *= 10
                    value += clean[k]
                if negative is not None:
                    value = np.where(negative, -value, value)
            values[key] = value
        values["error"] = is_true
        return values, nulls

    @staticmethod
    def _wide(clean: np.ndarray, exponents: np.ndarray, negative: np.ndarray | None, unsigned: bool,
              text: np.ndarray) -> np.ndarray | None:
        """A field of 16 or more digits, exactly: uint64 arithmetic (20 digits fit; a signed
        value is its two's complement), values past the type's range found and refused."""
        weights = np.where(exponents >= 0, np.uint64(10) ** np.maximum(exponents, 0).astype(np.uint64), np.uint64(0))
        magnitude = (clean.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
        approximate = clean.astype(np.float64) @ np.where(exponents >= 0, 10.0 ** np.maximum(exponents, 0), 0.0)
        if negative is None:
            negative = np.zeros(len(clean), bool)
        for row in np.flatnonzero(approximate >= 9.2e18).tolist():
            exact = int(text[row].tobytes().replace(b" ", b"").replace(b"-", b"").replace(b".", b"") or b"0")
            limit = (1 << 64) - 1 if unsigned else (1 << 63) - (0 if negative[row] else 1)
            if exact > limit:
                return None
        if unsigned:
            return magnitude
        signed = magnitude.view(np.int64)
        return np.where(negative, -signed, signed)


def _digits(values: pa.Array, width: int) -> np.ndarray:
    """Integers (or strings) right-aligned in ``width`` columns, as a (rows, width) byte matrix."""
    if not pa.types.is_string(values.type):
        values = pc.cast(values, pa.string())
    text = pc.utf8_lpad(values, width, " ")
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    n = len(text)
    offsets = np.frombuffer(text.buffers()[1], np.int32, n + 1, text.offset * 4)
    if offsets[-1] - offsets[0] != n * width:  # a value wider than its field: a bug, not bad input
        raise AssertionError(f"value wider than {width} characters")
    if n == 0:
        return np.empty((0, width), np.uint8)
    return np.frombuffer(text.buffers()[2], np.uint8, n * width, offsets[0]).reshape(n, width)


def _microseconds(nanoseconds: np.ndarray, width: int) -> np.ndarray:
    """Nanoseconds as microseconds with three decimals, right-aligned in ``width`` columns."""
    digits = _digits(pa.array(nanoseconds, pa.int64()), width - 1)
    out = np.empty((len(nanoseconds), width), np.uint8)
    out[:, : width - 4] = digits[:, : width - 4]
    out[:, width - 4] = ord(".")
    out[:, width - 3:] = digits[:, width - 4:]
    # Below one microsecond lpad left blanks where "0.0" digits belong.
    fraction = out[:, width - 3:]
    fraction[fraction == ord(" ")] = ord("0")
    units = out[:, width - 5]
    units[units == ord(" ")] = ord("0")
    return out


def _width(low: int, high: int, minimum: int = 1) -> int:
    return max(minimum, len(str(low)), len(str(high)))


def _min_max(column: pa.ChunkedArray, default: int = 0) -> tuple[int, int]:
    result = pc.min_max(column)
    low, high = result["min"].as_py(), result["max"].as_py()
    return (default if low is None else int(low)), (default if high is None else int(high))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ChromeJsonExporter(Exporter):
    keeps_row_order = False
    compress = False

    # ------------------------------------------------------------------ write

    def _write(self, table: pa.Table, path: Path) -> None:
        layout = TraceLayout(table)
        with open(path, "wb") as raw:
            if self.compress:
                # mtime=0: the same table gives the same bytes.
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0) as sink:
                    self._write_events(layout, sink, path)
            else:
                self._write_events(layout, raw, path)

    def _write_events(self, layout: TraceLayout, sink: BinaryIO, path: Path) -> None:
        table = layout.table
        json_pid, json_tid = self._json_ids(layout)
        widths = {
            "ts": 1 + _width(0, _min_max(table.column("start_ns"))[1] - layout.start_ns, 4),
            "dur": 1 + _width(0, _min_max(table.column("duration_ns"))[1], 4),
            "pid": _width(0, int(json_pid.max(initial=0))),
            "tid": _width(0, int(json_tid.max(initial=0))),
            "span_id": _width(*_min_max(table.column("span_id"))),
            "parent_id": _width(*_min_max(table.column("parent_id")), minimum=4),
            "depth": _width(*_min_max(table.column("depth"))),
            "arg": _width(*_min_max(table.column("arg")), minimum=4),
            "error": 5,
        }
        line = _LineLayout(widths)
        sink.write(self._header(layout, line, json_pid, json_tid).encode())

        # Per thread, its pid and tid fields, formatted once.
        thread_pid_text = _digits(pa.array(json_pid[layout.thread_process], pa.int64()), widths["pid"])
        thread_tid_text = _digits(pa.array(json_tid, pa.int64()), widths["tid"])
        error_text = np.frombuffer(b"false true", np.uint8).reshape(2, 5)
        template = np.concatenate([np.frombuffer(b",\n", np.uint8), line.template])
        suffixes: dict[int, str] = {}

        with Progress(layout.num_rows, f"writing {path.name}") as progress:
            for batch in layout.batches():
                rows = batch.rows
                n = rows.num_rows
                prefix = np.empty((n, len(template)), np.uint8)
                prefix[:] = template
                o = {key: 2 + offset for key, offset in line.offsets.items()}

                def put(key: str, text: np.ndarray) -> None:
                    prefix[:, o[key]: o[key] + widths[key]] = text

                start = rows.column("start_ns").to_numpy()
                duration = rows.column("duration_ns").to_numpy()
                put("ts", _microseconds(start - layout.start_ns, widths["ts"]))
                put("dur", _microseconds(duration, widths["dur"]))
                put("pid", thread_pid_text[batch.thread])
                put("tid", thread_tid_text[batch.thread])
                put("span_id", _digits(rows.column("span_id").combine_chunks(), widths["span_id"]))
                for key in _NULLABLE_FIELDS:
                    text = pc.fill_null(pc.cast(rows.column(key).combine_chunks(), pa.string()), "null")
                    put(key, _digits(text, widths[key]))
                put("depth", _digits(rows.column("depth").combine_chunks(), widths["depth"]))
                put("error", error_text[rows.column("error").to_numpy().astype(np.intp)])

                suffix = self._suffixes(layout, batch, duration == 0, suffixes)
                lines = pc.binary_join_element_wise(
                    pa.StringArray.from_buffers(
                        n, pa.py_buffer(np.arange(0, (n + 1) * prefix.shape[1], prefix.shape[1], dtype=np.int32)),
                        pa.py_buffer(prefix),
                    ),
                    suffix,
                    "",
                )
                offsets = np.frombuffer(lines.buffers()[1], np.int32, n + 1, lines.offset * 4)
                sink.write(memoryview(lines.buffers()[2])[offsets[0]: offsets[-1]])
                progress.advance(n)
        sink.write(b"\n]}\n")

    @staticmethod
    def _json_ids(layout: TraceLayout) -> tuple[np.ndarray, np.ndarray]:
        """Event pid per process and tid per thread: the real ones when they fit in uint32
        (and pids are not shared by two ranks), else 1, 2, ..."""
        pids = layout.process_pid
        if len(pids) and (pids.min() >= 0 and pids.max() <= UINT32_MAX and len(np.unique(pids)) == len(pids)):
            json_pid = pids.copy()
        else:
            json_pid = np.arange(1, len(pids) + 1, dtype=np.int64)
        tids = layout.thread_tid
        if len(tids) and tids.min() >= 0 and tids.max() <= UINT32_MAX:
            json_tid = tids.copy()
        else:
            json_tid = np.arange(1, len(tids) + 1, dtype=np.int64)
        return json_pid, json_tid

    @staticmethod
    def _header(layout: TraceLayout, line: _LineLayout, json_pid: np.ndarray, json_tid: np.ndarray) -> str:
        other = {
            "hotspan.format": FORMAT_MARK,
            "hotspan.trace_start_ns": layout.start_ns,
            "hotspan.layout": line.to_json(),
            "hotspan.metadata": {
                key.decode("utf-8", "backslashreplace"): value.decode("utf-8", "backslashreplace")
                for key, value in layout.metadata.items()
            },
        }
        events = []
        for process in range(layout.num_processes):
            pid = int(json_pid[process])
            rank = int(layout.process_rank[process])
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {
                "name": layout.process_name(process), "hotspan.pid": int(layout.process_pid[process]), "hotspan.rank": rank}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": rank}})
        for thread in range(layout.num_threads):
            pid = int(json_pid[layout.thread_process[thread]])
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(json_tid[thread]), "args": {
                "name": layout.thread_names[layout.thread_name[thread]], "hotspan.thread_id": int(layout.thread_tid[thread])}})
        head = _dumps({"displayTimeUnit": "ns", "otherData": other, "traceEvents": []})
        return head[:-2] + ",".join(_dumps(event) for event in events)

    @staticmethod
    def _suffixes(layout: TraceLayout, batch: Batch, instant: np.ndarray, cache: dict[int, str]) -> pa.Array:
        """Per row the text after the numbers: thread name if renamed, ph, name, cat."""
        n_names, n_categories, n_thread_names = len(layout.names), len(layout.categories), len(layout.thread_names)
        if (n_names + 1) * (n_categories + 1) * (n_thread_names + 1) * 2 >= 1 << 62:
            raise ValueError("too many distinct names, categories and thread names for one trace")
        key = ((batch.name.astype(np.int64) * (n_categories + 1) + batch.category + 1) * (n_thread_names + 1)
               + batch.thread_name + 1) * 2 + instant
        distinct, inverse = np.unique(key, return_inverse=True)
        texts = []
        for k in distinct.tolist():
            text = cache.get(k)
            if text is None:
                is_instant, rest = k % 2, k // 2
                thread_name, rest = rest % (n_thread_names + 1) - 1, rest // (n_thread_names + 1)
                category, name = rest % (n_categories + 1) - 1, rest // (n_categories + 1)
                renamed = f',"thread_name":{_dumps(layout.thread_names[thread_name])}' if thread_name >= 0 else ""
                phase = '"ph":"i","s":"t"' if is_instant else '"ph":"X"'
                cat = f',"cat":{_dumps(layout.categories[category])}' if category >= 0 else ""
                text = cache[k] = f'{renamed}}},{phase},"name":{_dumps(layout.names[name])}{cat}}}'
            texts.append(text)
        return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1), pa.int64()))

    # ------------------------------------------------------------------ read

    def _read(self, path: Path) -> pa.Table:
        with _open_trace(path) as stream:
            first = stream.readline(1 << 26)
            own = _own_header(first)
            if own is not None:
                table = _FastReader(path, own).read(stream)
                if table is not None:
                    return table
        with _open_trace(path) as stream:
            data = stream.read()
        return _read_document(path, data)


class ChromeJsonGzExporter(ChromeJsonExporter):
    compress = True


def _open_trace(path: Path) -> BinaryIO:
    """The file's bytes, gunzipped when they are gzip (whatever the extension says)."""
    raw = open(path, "rb")
    try:
        magic = raw.read(2)
        raw.seek(0)
    except BaseException:
        raw.close()
        raise
    if magic == _GZIP_MAGIC:
        raw.close()
        return gzip.open(path, "rb")
    return raw


# --------------------------------------------------------------------------- fast reader


def _own_header(first_line: bytes) -> dict | None:
    """The parsed header of a file this module wrote, or None."""
    if not first_line.startswith(b'{"displayTimeUnit":"ns","otherData":{"hotspan.format":"' + FORMAT_MARK.encode() + b'"'):
        return None
    text = first_line.rstrip(b"\r\n")
    comma = text.endswith(b",")
    if comma:
        text = text[:-1]
    try:
        header = json.loads(text + b"]}")
    except ValueError:
        return None
    if isinstance(header, dict):
        header["hotspan.header_comma"] = comma
    if not isinstance(header, dict) or not isinstance(header.get("otherData"), dict):
        return None
    return header if header["otherData"].get("hotspan.format") == FORMAT_MARK else None


class _FastReader:
    """Reads the event lines of our own layout with numpy; None when a line departs from it."""

    def __init__(self, path: Path, header: dict):
        self.path = path
        other = header.get("otherData")
        self.other = other if isinstance(other, dict) else {}
        self.layout = _LineLayout.from_json(self.other.get("hotspan.layout"))
        self.events = header.get("traceEvents")
        # Whether the line before the next event line ended with a comma (the header does
        # when events follow it).
        self.previous_comma = header.get("hotspan.header_comma", False)

    def read(self, stream: BinaryIO) -> pa.Table | None:
        if self.layout is None or not isinstance(self.events, list):
            return None
        try:
            threads = _ThreadMap.from_own_header(self.events)
            start_ns = int(self.other["hotspan.trace_start_ns"])
        except (KeyError, TypeError, ValueError):
            return None
        names: dict[str, int] = {}
        categories: dict[str, int] = {}
        thread_names: dict[str, int] = {name: i for i, name in enumerate(dict.fromkeys(threads.names))}
        parts: list[dict[str, np.ndarray]] = []
        rest = b""
        ended = False
        while True:
            chunk = stream.read(_READ_CHUNK)
            data = rest + chunk
            if not chunk:
                if data and not data.endswith(b"\n"):
                    data += b"\n"
            last_newline = data.rfind(b"\n")
            if last_newline < 0:
                if not chunk:
                    break
                rest = data
                continue
            usable, rest = data[: last_newline + 1], data[last_newline + 1:]
            buffer = np.frombuffer(usable, np.uint8)
            ends = np.flatnonzero(buffer == ord("\n"))
            starts = np.r_[0, ends[:-1] + 1]
            # Blank lines are fine; the closing "]}" must be the last thing in the file.
            length = ends - starts
            events = length >= self.layout.width
            if ended and events.any():
                return None
            # Every event line but the file's last ends with the comma that separates it
            # from the next (the writer puts ",\n" before each event).
            comma = buffer[np.maximum(ends - 1, 0)] == ord(",")
            for i in np.flatnonzero(~events).tolist():
                text = usable[starts[i]: ends[i]].strip()
                if text == b"]}" and not events[i + 1:].any():
                    ended = True
                    before = np.flatnonzero(events[:i])
                    last_comma = comma[before[-1]] if len(before) else self.previous_comma
                    if last_comma:
                        return None
                    continue
                return None
            event_lines = np.flatnonzero(events)
            if len(event_lines):
                if not comma[event_lines[:-1]].all() or (not self.previous_comma):
                    return None
                self.previous_comma = bool(comma[event_lines[-1]])
            if events.any():
                part = self._parse_lines(usable, buffer, starts[events], ends[events], threads, start_ns,
                                         names, categories, thread_names)
                if part is None:
                    return None
                parts.append(part)
            if not chunk:
                break
        if not ended or rest.strip():
            return None
        return _assemble(parts, names, categories, thread_names, self.other, self.path)

    def _parse_lines(self, data: bytes, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     threads: "_ThreadMap", start_ns: int, names: dict, categories: dict,
                     thread_names: dict) -> dict[str, np.ndarray] | None:
        line = self.layout
        parsed = _scan_heads_native(line, data, starts) if _scan_heads is not None else None
        if parsed is None:
            # Row copies of each line's fixed-width head (a window view, indexed by line start).
            matrix = np.lib.stride_tricks.sliding_window_view(buffer, line.width)[starts]
            if ((matrix ^ line.template) & line.constant_mask).any():
                return None
            parsed = line.numbers.parse(matrix)
            if parsed is None:
                return None
        values, nulls = parsed

        # The strings: the few distinct texts after the numbers, parsed once each.
        lines = pa.Array.from_buffers(pa.binary(), len(starts), [
            None, pa.py_buffer(np.r_[starts, ends[-1]].astype(np.int32)), pa.py_buffer(data)])
        # An explicit stop: pyarrow 26's binary_slice without one fails ("negative resize").
        tails = pc.dictionary_encode(pc.binary_slice(lines, line.width, int((ends - starts).max()) + 1))
        distinct = tails.dictionary.to_pylist()
        tail_instant = np.empty(len(distinct), bool)
        tail_name = np.empty(len(distinct), np.int32)
        tail_category = np.empty(len(distinct), np.int32)
        tail_thread_name = np.empty(len(distinct), np.int32)
        for i, tail in enumerate(distinct):
            parsed_tail = _parse_tail(tail)
            if parsed_tail is None:
                return None
            instant, name, category, thread_name = parsed_tail
            tail_instant[i] = instant
            tail_name[i] = names.setdefault(name, len(names))
            tail_category[i] = -1 if category is None else categories.setdefault(category, len(categories))
            tail_thread_name[i] = -1 if thread_name is None else thread_names.setdefault(thread_name, len(thread_names))
        which = tails.indices.to_numpy()

        thread = threads.lookup(values["pid"], values["tid"])
        if thread is None:
            return None
        instant = tail_instant[which]
        if (instant & (values["dur"] != 0)).any():
            return None
        thread_name = tail_thread_name[which]
        own_name = np.array([thread_names[name] for name in threads.names], np.int32)[thread]
        return {
            "span_id": values["span_id"].astype(np.uint64),
            "parent_id": values["parent_id"].astype(np.uint64),
            "parent_id_null": nulls["parent_id"],
            "name": tail_name[which],
            "category": tail_category[which],
            "start_ns": values["ts"] + start_ns,
            "duration_ns": values["dur"],
            "depth": values["depth"].astype(np.int32),
            "thread_id": threads.thread_id[thread],
            "thread_name": np.where(thread_name >= 0, thread_name, own_name).astype(np.int32),
            "pid": threads.pid[thread],
            "rank": threads.rank[thread].astype(np.int32),
            "arg": values["arg"],
            "arg_null": nulls["arg"],
            "error": values["error"],
        }


try:
    from .._native import _scan_heads
except ImportError:  # the export package also works without the compiled core
    _scan_heads = None


def _scan_heads_native(line: _LineLayout, data: bytes, starts: np.ndarray
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """(values, nulls) as _NumberFields.parse gives them, from the C scanner; None when a
    line departs from the layout (the numpy parser then decides, as the reference)."""
    scanned = _scan_heads(data, np.ascontiguousarray(starts, np.int64), line.scan_template, line.scan_mask,
                          line.scan_fields)
    if scanned is None:
        return None
    n = len(starts)
    matrix = np.frombuffer(scanned[0], np.int64).reshape(len(_LINE_FIELDS), n)
    null_matrix = np.frombuffer(scanned[1], np.uint8).reshape(len(_LINE_FIELDS), n)
    values, nulls = {}, {}
    for index, (key, _) in enumerate(_LINE_FIELDS):
        if key == "error":
            values[key] = matrix[index].astype(bool)
        elif key in ("span_id", "parent_id"):
            values[key] = matrix[index].view(np.uint64)
        else:
            values[key] = matrix[index]
        if key in _NULLABLE_FIELDS:
            nulls[key] = null_matrix[index].astype(bool)
    return values, nulls


def _columns_equal(field: np.ndarray, text: bytes) -> np.ndarray:
    """Per row, whether the row's bytes are ``text`` (column by column: short rows make
    per-row reductions slow)."""
    equal = field[:, 0] == text[0]
    for k in range(1, len(text)):
        equal &= field[:, k] == text[k]
    return equal


def _parse_tail(tail: bytes) -> tuple[bool, str, str | None, str | None] | None:
    """(instant, name, category, renamed thread) from the text after an event's numbers."""
    text = tail.rstrip(b" \r\n\t")
    if text.endswith(b","):
        text = text[:-1]
    try:
        event = json.loads(b'{"args":{"error":false' + text)
    except ValueError:
        return None
    if not isinstance(event, dict) or set(event) - {"args", "ph", "s", "name", "cat"}:
        return None
    args = event.get("args")
    phase = event.get("ph")
    name = event.get("name")
    category = event.get("cat")
    thread_name = args.get("thread_name") if isinstance(args, dict) else None
    if phase not in ("X", "i") or not isinstance(name, str) or not (category is None or isinstance(category, str)):
        return None
    if not (thread_name is None or isinstance(thread_name, str)) or set(args) - {"error", "thread_name"}:
        return None
    return phase == "i", name, category, thread_name


def _assemble(parts: list[dict[str, np.ndarray]], names: dict, categories: dict, thread_names: dict,
              other: dict, path: Path) -> pa.Table:
    """The span table from per-chunk column arrays and the dictionaries they index."""

    def joined(key: str, dtype) -> np.ndarray:
        return np.concatenate([part[key] for part in parts]) if parts else np.empty(0, dtype)

    def strings(codes: np.ndarray, values: dict) -> pa.DictionaryArray:
        dictionary = pa.array(list(values), pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=codes < 0), dictionary)

    start = joined("start_ns", np.int64)
    duration = joined("duration_ns", np.int64)
    columns = {
        "span_id": pa.array(joined("span_id", np.uint64), pa.uint64()),
        "parent_id": pa.array(joined("parent_id", np.uint64), pa.uint64(), mask=joined("parent_id_null", bool)),
        "name": strings(joined("name", np.int32), names),
        "category": strings(joined("category", np.int32), categories),
        "start_ns": pa.array(start, pa.int64()),
        "end_ns": pa.array(start + duration, pa.int64()),
        "duration_ns": pa.array(duration, pa.int64()),
        "depth": pa.array(joined("depth", np.int32), pa.int32()),
        "thread_id": pa.array(joined("thread_id", np.int64), pa.int64()),
        "thread_name": strings(joined("thread_name", np.int32), thread_names),
        "pid": pa.array(joined("pid", np.int64), pa.int64()),
        "rank": pa.array(joined("rank", np.int32), pa.int32()),
        "arg": pa.array(joined("arg", np.int64), pa.int64(), mask=joined("arg_null", bool)),
        "error": pa.array(joined("error", bool), pa.bool_()),
    }
    return pa.table(columns, schema=SPAN_SCHEMA.with_metadata(_metadata_from(other)))


def _metadata_from(other: Any) -> dict[bytes, bytes] | None:
    metadata = other.get("hotspan.metadata") if isinstance(other, dict) else None
    if not isinstance(metadata, dict):
        return None
    return {str(key).encode(): (value if isinstance(value, str) else _dumps(value)).encode() for key, value in metadata.items()}


# --------------------------------------------------------------------------- threads


class _ThreadMap:
    """Event (pid, tid) -> real pid, rank, thread id and thread name, from ``M`` events."""

    def __init__(self):
        self.keys: list[tuple[Any, Any]] = []
        self.index: dict[tuple[Any, Any], int] = {}
        self.names: list[str] = []
        self._pid: list[int] = []
        self._rank: list[int] = []
        self._thread_id: list[int] = []

    @classmethod
    def from_own_header(cls, events: list) -> "_ThreadMap":
        """From the ``M`` events of our own header, which declare every thread.

        Raises KeyError/TypeError/ValueError when they do not have our layout.
        """
        threads = cls()
        processes: dict[int, tuple[int, int]] = {}
        for event in events:
            if event["ph"] == "M" and event["name"] == "process_name":
                args = event["args"]
                processes[int(event["pid"])] = (int(args["hotspan.pid"]), int(args["hotspan.rank"]))
        for event in events:
            if event["ph"] == "M" and event["name"] == "thread_name":
                args = event["args"]
                pid, rank = processes[int(event["pid"])]
                threads.add((int(event["pid"]), int(event["tid"])), pid, rank, int(args["hotspan.thread_id"]), str(args["name"]))
        return threads

    def add(self, key: tuple[Any, Any], pid: int, rank: int, thread_id: int, name: str) -> int:
        found = self.index.get(key)
        if found is not None:
            return found
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self.names.append(name)
        self._pid.append(pid)
        self._rank.append(rank)
        self._thread_id.append(thread_id)
        return len(self.keys) - 1

    @property
    def pid(self) -> np.ndarray:
        return np.array(self._pid, np.int64)

    @property
    def rank(self) -> np.ndarray:
        return np.array(self._rank, np.int64)

    @property
    def thread_id(self) -> np.ndarray:
        return np.array(self._thread_id, np.int64)

    def lookup(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray | None:
        """Thread index per event from its (pid, tid), or None when one is not declared."""
        if not self.keys:
            return None if len(pid) else np.empty(0, np.int64)
        known = np.array([(int(p) << 32) | int(t) for p, t in self.keys], np.int64)
        order = np.argsort(known)
        wanted = (pid.astype(np.int64) << 32) | tid.astype(np.int64)
        at = np.searchsorted(known[order], wanted).clip(0, len(known) - 1)
        if not (known[order][at] == wanted).all():
            return None
        return order[at]


# --------------------------------------------------------------------------- general reader


def _read_document(path: Path, data: bytes) -> pa.Table:
    if not data.strip():
        raise TraceFileError(path, "empty file, not a Chrome JSON trace")
    try:
        document = json.loads(data)
    except UnicodeDecodeError as exc:
        raise TraceFileError(path, f"not UTF-8 text, so not a Chrome JSON trace ({exc.reason} at byte {exc.start})") from exc
    except ValueError as exc:
        document = _repair_array_form(data)
        if document is None:
            raise TraceFileError(path, f"not valid JSON (truncated or not a trace?): {exc}") from exc
    other: Any = None
    if isinstance(document, dict):
        if "traceEvents" not in document:
            raise TraceFileError(path, "a JSON object without 'traceEvents', not a Chrome trace")
        events = document["traceEvents"]
        other = document.get("otherData")
    elif isinstance(document, list):
        events = document
    else:
        raise TraceFileError(path, f"a JSON {type(document).__name__}, not a Chrome trace (object or array of events)")
    if not isinstance(events, list):
        raise TraceFileError(path, "'traceEvents' is not a list of events")
    own = isinstance(other, dict) and other.get("hotspan.format") == FORMAT_MARK
    return _EventReader(path, own, other).read(events)


def _repair_array_form(data: bytes) -> Any:
    """The array form may leave out its closing bracket (the format allows it, for
    tracers killed mid-run); try that before calling the file broken."""
    text = data.strip()
    if not text.startswith(b"[") or text.endswith(b"]"):
        return None
    text = text.rstrip(b", \t\r\n")
    try:
        return json.loads(text + b"]")
    except ValueError:
        return None


class _EventReader:
    """Spans from a list of decoded events (one Python step per event; foreign files)."""

    def __init__(self, path: Path, own: bool, other: Any):
        self.path = path
        self.own = own
        self.other = other
        # Our own files rebase timestamps to the trace start and say where it was.
        origin = other.get("hotspan.trace_start_ns", 0) if own else 0
        if not isinstance(origin, int) or isinstance(origin, bool):
            raise TraceFileError(path, "otherData['hotspan.trace_start_ns'] is not an integer")
        self.origin = origin

    def fail(self, index: int, problem: str) -> TraceFileError:
        return TraceFileError(self.path, f"event {index}: {problem}")

    def number(self, event: dict, key: str, index: int, default: Any = None) -> Any:
        value = event.get(key, default)
        if value is None and default is None:
            raise self.fail(index, f"no {key!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
            raise self.fail(index, f"{key!r} is not a finite number: {value!r}"[:200])
        return value

    def nanoseconds(self, event: dict, key: str, index: int, default: Any = None) -> int:
        value = self.number(event, key, index, default)
        ns = value * 1000 if isinstance(value, int) else round(value * 1000)
        if not -(1 << 63) <= ns < (1 << 63):
            raise self.fail(index, f"{key!r} out of range: {value!r}")
        return int(ns)

    def read(self, events: list) -> pa.Table:
        threads: dict[tuple[Any, Any], int] = {}
        thread_keys: list[tuple[Any, Any]] = []
        declared_names: dict[tuple[Any, Any], str] = {}
        processes: dict[Any, tuple[int, int]] = {}
        declared_thread_ids: dict[tuple[Any, Any], int] = {}
        spans: list[tuple] = []  # (thread, start, end, file order, name, category, args)
        open_spans: dict[int, list[tuple]] = {}

        def ident(value: Any, what: str, index: int) -> Any:
            if value is None:
                return 0
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise self.fail(index, f"{what} is neither an integer nor a string: {value!r}"[:200])
            if isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
                raise self.fail(index, f"{what} out of range: {value}")
            return value

        def thread_of(event: dict, index: int) -> int:
            key = (ident(event.get("pid"), "pid", index), ident(event.get("tid"), "tid", index))
            found = threads.get(key)
            if found is None:
                found = threads[key] = len(thread_keys)
                thread_keys.append(key)
            return found

        for index, event in enumerate(events):
            if not isinstance(event, dict):
                raise self.fail(index, f"not an object: {event!r}"[:200])
            phase = event.get("ph")
            if phase == "M":
                self._metadata_event(event, index, declared_names, processes, declared_thread_ids, ident)
                continue
            if phase not in ("X", "B", "E", "i", "I"):
                continue  # counters, flows, async and sample events carry no spans
            thread = thread_of(event, index)
            start = self.nanoseconds(event, "ts", index)
            name = event.get("name", "")
            if not isinstance(name, str):
                name = _dumps(name)
            category = event.get("cat")
            if category is not None and not isinstance(category, str):
                category = _dumps(category)
            args = event.get("args")
            if not isinstance(args, dict):
                args = {}
            if phase == "X":
                duration = self.nanoseconds(event, "dur", index, 0)
                if duration < 0:
                    raise self.fail(index, f"negative duration {event.get('dur')!r}")
                end = start + duration
                if not self.own and isinstance(event["ts"], float) and isinstance(event.get("dur"), float):
                    # Round the end itself, not start and duration apart: a child that ends
                    # with its parent must not end a nanosecond after it.
                    end = max(start, round((event["ts"] + event["dur"]) * 1000))
                spans.append((thread, start, end, index, name, category, args))
            elif phase in ("i", "I"):
                spans.append((thread, start, start, index, name, category, args))
            elif phase == "B":
                open_spans.setdefault(thread, []).append((start, index, name, category, args))
            else:  # "E" closes the innermost open "B" of its thread; a stray one closes nothing
                stack = open_spans.get(thread)
                if stack:
                    begin, order, begin_name, begin_category, begin_args = stack.pop()
                    if start < begin:
                        raise self.fail(index, "an 'E' event earlier than its 'B'")
                    end_args = event.get("args")
                    merged = {**begin_args, **end_args} if isinstance(end_args, dict) else begin_args
                    spans.append((thread, begin, start, order, begin_name, begin_category, merged))
        # "B" events never closed (a tracer killed mid-span) have no duration: left out.
        return self._table(spans, thread_keys, declared_names, processes, declared_thread_ids)

    def _metadata_event(self, event, index, names, processes, thread_ids, ident) -> None:
        args = event.get("args")
        if not isinstance(args, dict):
            return
        key = (ident(event.get("pid"), "pid", index), ident(event.get("tid"), "tid", index))
        if event.get("name") == "thread_name" and isinstance(args.get("name"), str):
            names[key] = args["name"]
            if self.own and isinstance(args.get("hotspan.thread_id"), int):
                thread_ids[key] = args["hotspan.thread_id"]
        elif event.get("name") == "process_name" and self.own:
            pid, rank = args.get("hotspan.pid"), args.get("hotspan.rank")
            if isinstance(pid, int) and isinstance(rank, int):
                processes[key[0]] = (pid, rank)

    def _table(self, spans, thread_keys, declared_names, processes, declared_thread_ids) -> pa.Table:
        n = len(spans)
        # Trace order: thread (by pid, tid), start, longer first (a parent before a child
        # that starts with it), then file order (B/E pairs were collected at their E).
        string_codes: dict[Any, int] = {}

        def numeric(value: Any) -> int:
            if isinstance(value, int):
                return value
            # A string pid/tid (some tools write names there): a stable number above uint32.
            return string_codes.setdefault(value, UINT32_MAX + 1 + len(string_codes))

        thread_pid = [numeric(pid) for pid, _ in thread_keys]
        thread_tid = [numeric(tid) for _, tid in thread_keys]
        thread_order = sorted(range(len(thread_keys)), key=lambda t: (thread_pid[t], thread_tid[t]))
        thread_rank = {t: i for i, t in enumerate(thread_order)}
        if self.own:
            spans.sort(key=lambda s: s[3])  # the file is in trace order already; keep it
        else:
            spans.sort(key=lambda s: (thread_rank[s[0]], s[1], -s[2], s[3]))

        span_id = np.empty(n, np.uint64)
        parent_id = np.zeros(n, np.uint64)
        parent_null = np.ones(n, bool)
        depth = np.zeros(n, np.int32)
        arg = np.zeros(n, np.int64)
        arg_null = np.ones(n, bool)
        error = np.zeros(n, bool)
        rank = np.zeros(n, np.int32)
        renamed: list[str | None] = [None] * n

        if self.own:
            self._own_ids(spans, span_id, parent_id, parent_null, depth)
        else:
            self._nesting(spans, span_id, parent_id, parent_null, depth)
        for i, (_, _, _, order, _, _, args) in enumerate(spans):
            value = args.get("arg")
            if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63):
                arg[i] = value
                arg_null[i] = False
            elif self.own and value is not None:
                raise self.fail(order, f"args.arg is not an int64: {value!r}"[:200])
            error[i] = args.get("error") is True
            value = args.get("rank")
            if isinstance(value, int) and not isinstance(value, bool) and -(1 << 31) <= value < (1 << 31):
                rank[i] = value
            if self.own and isinstance(args.get("thread_name"), str):
                renamed[i] = args["thread_name"]

        thread = np.array([s[0] for s in spans], np.int64)
        start = np.array([s[1] for s in spans], np.int64) + self.origin
        end = np.array([s[2] for s in spans], np.int64) + self.origin
        pid = np.array(thread_pid, np.int64)[thread] if n else np.empty(0, np.int64)
        tid = np.array(thread_tid, np.int64)[thread] if n else np.empty(0, np.int64)
        thread_names = [
            declared_names.get(key, key[1] if isinstance(key[1], str) else f"thread {key[1]}") for key in thread_keys
        ]
        if self.own:
            for t, key in enumerate(thread_keys):
                real = processes.get(key[0])
                if real is None or key not in declared_thread_ids:
                    raise TraceFileError(self.path, f"thread {key} is not declared by the file's 'M' events")
                thread_pid[t], thread_tid[t] = real[0], declared_thread_ids[key]
            pid = np.array(thread_pid, np.int64)[thread] if n else pid
            tid = np.array(thread_tid, np.int64)[thread] if n else tid
            rank = np.array([processes[key[0]][1] for key in thread_keys], np.int32)[thread] if n else rank
        thread_name = [renamed[i] if renamed[i] is not None else thread_names[spans[i][0]] for i in range(n)]

        def strings(values: list) -> pa.Array:
            return pc.dictionary_encode(pa.array(values, pa.string()))

        columns = {
            "span_id": pa.array(span_id, pa.uint64()),
            "parent_id": pa.array(parent_id, pa.uint64(), mask=parent_null),
            "name": strings([s[4] for s in spans]),
            "category": strings([s[5] for s in spans]),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "duration_ns": pa.array(end - start, pa.int64()),
            "depth": pa.array(depth, pa.int32()),
            "thread_id": pa.array(tid, pa.int64()),
            "thread_name": strings(thread_name),
            "pid": pa.array(pid, pa.int64()),
            "rank": pa.array(rank, pa.int32()),
            "arg": pa.array(arg, pa.int64(), mask=arg_null),
            "error": pa.array(error, pa.bool_()),
        }
        metadata = _metadata_from(self.other) if self.own else None
        return pa.table(columns, schema=SPAN_SCHEMA.with_metadata(metadata) if metadata else SPAN_SCHEMA)

    def _own_ids(self, spans, span_id, parent_id, parent_null, depth) -> None:
        for i, span in enumerate(spans):
            args, order = span[6], span[3]
            value = args.get("span_id")
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < (1 << 64):
                raise self.fail(order, "no valid args.span_id in a hotspan trace")
            span_id[i] = value
            value = args.get("parent_id")
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < (1 << 64):
                    raise self.fail(order, f"args.parent_id is not a span id: {value!r}"[:200])
                parent_id[i] = value
                parent_null[i] = False
            value = args.get("depth", 0)
            if not isinstance(value, int) or isinstance(value, bool) or not -(1 << 31) <= value < (1 << 31):
                raise self.fail(order, f"args.depth is not an int32: {value!r}"[:200])
            depth[i] = value

    @staticmethod
    def _nesting(spans, span_id, parent_id, parent_null, depth) -> None:
        """Span ids 1, 2, ... in trace order; parent and depth from nesting per thread.

        A span is the child of the innermost open span that contains it; one that
        starts exactly when another ends is its sibling; one that overlaps without being
        contained closes the spans it outlives (a viewer would not nest it either).
        """
        stack: list[int] = []
        current_thread = None
        for i, (thread, start, end, _, _, _, _) in enumerate(spans):
            span_id[i] = i + 1
            if thread != current_thread:
                stack.clear()
                current_thread = thread
            while stack and (spans[stack[-1]][2] <= start or spans[stack[-1]][2] < end):
                stack.pop()
            if stack:
                parent_id[i] = stack[-1] + 1
                parent_null[i] = False
            depth[i] = len(stack)
            if end > start:
                stack.append(i)
