"""Protocol buffers wire format, vectorised with numpy: one message per row.

Writing: describe a message as a tree of fields whose values are arrays (one per row) or
constants, each field optionally present only in some rows; :func:`encode` sizes every
row's message (nested lengths included) and writes all rows into one byte buffer with a
handful of numpy passes per field. Reading: :func:`walk` decodes the fields of many
messages at once, one field of every message per step.

A few scalar helpers cover the handful of messages (descriptors, interned strings) that
are written or read once per thread rather than once per span.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

VARINT, I64, LEN, I32 = 0, 1, 2, 5

_U64 = np.uint64


class ProtobufError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


# --------------------------------------------------------------------------- scalar


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values: two's complement, ten bytes
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3 | VARINT) + varint(value)


def field_bytes(number: int, value: bytes | str) -> bytes:
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | LEN) + varint(len(value)) + value


def parse_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one message; LEN values as bytes."""
    out = []
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _scalar_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, pos = _scalar_varint(data, pos)
        elif wire == LEN:
            length, pos = _scalar_varint(data, pos)
            if pos + length > end:
                raise ProtobufError("a length-delimited field runs past its message")
            value, pos = data[pos: pos + length], pos + length
        elif wire == I64:
            value, pos = int.from_bytes(data[pos: pos + 8], "little"), pos + 8
        elif wire == I32:
            value, pos = int.from_bytes(data[pos: pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if pos > end:
            raise ProtobufError("a field runs past its message")
        out.append((number, wire, value))
    return out


def _scalar_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError("varint longer than ten bytes")


# --------------------------------------------------------------------------- vectorised writing


def varint_sizes(values: np.ndarray) -> np.ndarray:
    values = values.astype(_U64, copy=False)
    sizes = np.ones(len(values), np.int64)
    for k in range(1, 10):
        sizes += values >= _U64(1 << (7 * k))
    return sizes


def put_varints(buffer: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
    values = values.astype(_U64)
    positions = positions.astype(np.int64)
    while len(values):
        low = (values & _U64(0x7F)).astype(np.uint8)
        values = values >> _U64(7)
        more = values != 0
        buffer[positions] = low | (more.astype(np.uint8) << 7)
        positions, values = positions[more] + 1, values[more]


class Node:
    """A field of a message written for every row (where ``present``)."""

    number: int
    present: np.ndarray | None

    def __init__(self, number: int, present: np.ndarray | None):
        self.number = number
        self.present = present
        self._sizes: np.ndarray | None = None

    def rows(self, n: int, within: np.ndarray) -> np.ndarray:
        return within if self.present is None else within & self.present

    def sizes(self, n: int, within: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def write(self, buffer: np.ndarray, cursor: np.ndarray, within: np.ndarray) -> None:
        raise NotImplementedError


def _tag(number: int, wire: int) -> np.ndarray:
    return np.frombuffer(varint(number << 3 | wire), np.uint8)


def _put_constant(buffer: np.ndarray, positions: np.ndarray, constant: np.ndarray) -> None:
    for k, byte in enumerate(constant.tolist()):
        buffer[positions + k] = byte


def _per_row(values, n: int) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim == 0:
        return np.broadcast_to(values.astype(_U64) if values.dtype != _U64 else values, (n,))
    return values


class Varint(Node):
    """An integer field; int64 values are written as their two's complement (10 bytes if negative)."""

    def __init__(self, number: int, values, present: np.ndarray | None = None):
        super().__init__(number, present)
        self.tag = _tag(number, VARINT)
        self.values = values

    def _unsigned(self, n: int) -> np.ndarray:
        values = _per_row(self.values, n)
        if values.dtype == np.bool_:
            return values.astype(_U64)
        if values.dtype.kind == "i":
            return values.astype(np.int64).view(_U64)  # astype copies: contiguous, viewable
        return values.astype(_U64, copy=False)

    def sizes(self, n, within):
        rows = self.rows(n, within)
        self._values = self._unsigned(n)
        self._sizes = np.where(rows, len(self.tag) + varint_sizes(self._values), 0)
        return self._sizes

    def write(self, buffer, cursor, within):
        rows = np.flatnonzero(self.rows(len(cursor), within))
        at = cursor[rows]
        _put_constant(buffer, at, self.tag)
        put_varints(buffer, at + len(self.tag), self._values[rows])
        cursor[rows] += self._sizes[rows]


class Bytes(Node):
    """A length-delimited field whose value per row is ``table[code]`` (codes index a few strings)."""

    def __init__(self, number: int, table: list[bytes], codes: np.ndarray, present: np.ndarray | None = None):
        super().__init__(number, present)
        self.tag = _tag(number, LEN)
        self.flat = np.frombuffer(b"".join(table), np.uint8) if table else np.empty(0, np.uint8)
        lengths = np.array([len(v) for v in table], np.int64)
        self.table_starts = np.cumsum(lengths) - lengths
        self.table_lengths = lengths
        self.codes = codes

    def sizes(self, n, within):
        rows = self.rows(n, within)
        codes = np.where(rows, self.codes, 0)
        lengths = self.table_lengths[codes] if len(self.table_lengths) else np.zeros(n, np.int64)
        self._sizes = np.where(rows, len(self.tag) + varint_sizes(lengths) + lengths, 0)
        return self._sizes

    def write(self, buffer, cursor, within):
        rows = np.flatnonzero(self.rows(len(cursor), within))
        codes = self.codes[rows]
        lengths = self.table_lengths[codes]
        at = cursor[rows]
        _put_constant(buffer, at, self.tag)
        at = at + len(self.tag)
        put_varints(buffer, at, lengths)
        at = at + varint_sizes(lengths)
        total = int(lengths.sum())
        if total:
            step = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            buffer[np.repeat(at, lengths) + step] = self.flat[np.repeat(self.table_starts[codes], lengths) + step]
        cursor[rows] += self._sizes[rows]


class Message(Node):
    """A nested message field (length-delimited) made of child fields, in order."""

    def __init__(self, number: int, children: list[Node], present: np.ndarray | None = None):
        super().__init__(number, present)
        self.tag = _tag(number, LEN)
        self.children = children

    def sizes(self, n, within):
        rows = self.rows(n, within)
        inner = np.zeros(n, np.int64)
        for child in self.children:
            inner += child.sizes(n, rows)
        self._inner = inner
        self._sizes = np.where(rows, len(self.tag) + varint_sizes(inner) + inner, 0)
        return self._sizes

    def write(self, buffer, cursor, within):
        rows_mask = self.rows(len(cursor), within)
        rows = np.flatnonzero(rows_mask)
        at = cursor[rows]
        _put_constant(buffer, at, self.tag)
        put_varints(buffer, at + len(self.tag), self._inner[rows])
        cursor[rows] += len(self.tag) + varint_sizes(self._inner[rows])
        for child in self.children:
            child.write(buffer, cursor, rows_mask)


def encode(message: Message, n: int) -> np.ndarray:
    """The bytes of ``message`` (a field of the enclosing stream) for rows 0..n-1, concatenated."""
    everywhere = np.ones(n, bool)
    sizes = message.sizes(n, everywhere)
    ends = np.cumsum(sizes)
    buffer = np.empty(int(ends[-1]) if n else 0, np.uint8)
    cursor = ends - sizes
    message.write(buffer, cursor, everywhere)
    return buffer


# --------------------------------------------------------------------------- vectorised reading


def read_varints(buffer: np.ndarray, positions: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each position and the position after it; none may reach ``limit``."""
    result = np.zeros(len(positions), _U64)
    after = positions.astype(np.int64).copy()
    active = np.arange(len(positions))
    for k in range(10):
        if not len(active):
            break
        at = after[active]
        if (at >= limit[active]).any():
            raise ProtobufError("truncated varint")
        byte = buffer[at]
        result[active] |= (byte & 0x7F).astype(_U64) << _U64(7 * k)
        after[active] = at + 1
        active = active[byte >= 0x80]
    if len(active):
        raise ProtobufError("varint longer than ten bytes")
    return result, after


@dataclass
class Fields:
    """Every occurrence of each field in a set of messages.

    ``varint[number]`` = (message index, value); ``length[number]`` = (message index,
    start, end) of the field's bytes in the buffer. Occurrences come message by message
    in field order within each message only when sorted by ``order`` (the step at which
    they were read); most callers need one value per message.
    """

    varint: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    length: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def last_varint(self, number: int, count: int, default: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Per message: the field's (last) value and whether it was present."""
        values = np.full(count, default, _U64)
        present = np.zeros(count, bool)
        if number in self.varint:
            index, found = self.varint[number]
            values[index] = found
            present[index] = True
        return values, present


def walk(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """Decode the fields of the messages ``buffer[starts[i]:ends[i]]``, all at once."""
    found_varint: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    found_length: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    index = np.arange(len(starts))
    position = starts.astype(np.int64)
    end = ends.astype(np.int64)
    live = position < end
    index, position, end = index[live], position[live], end[live]
    while len(index):
        tag, position = read_varints(buffer, position, end)
        number = (tag >> _U64(3)).astype(np.int64)
        wire = (tag & _U64(7)).astype(np.int64)
        if (number == 0).any():
            raise ProtobufError("field number 0")
        value = np.zeros(len(index), _U64)
        is_varint = wire == VARINT
        is_length = wire == LEN
        if not (is_varint | is_length | (wire == I64) | (wire == I32)).all():
            raise ProtobufError("unsupported wire type")
        if is_varint.any():
            value[is_varint], position[is_varint] = read_varints(buffer, position[is_varint], end[is_varint])
        field_start = position.copy()
        if is_length.any():
            length, field_start[is_length] = read_varints(buffer, position[is_length], end[is_length])
            position[is_length] = field_start[is_length] + length.astype(np.int64)
        position[wire == I64] += 8
        position[wire == I32] += 4
        if (position > end).any():
            raise ProtobufError("a field runs past the end of its message")
        for number_value in np.unique(number).tolist():
            this = number == number_value
            varint_rows = this & is_varint
            if varint_rows.any():
                found_varint.setdefault(number_value, []).append((index[varint_rows], value[varint_rows]))
            length_rows = this & is_length
            if length_rows.any():
                found_length.setdefault(number_value, []).append(
                    (index[length_rows], field_start[length_rows], position[length_rows]))
        live = position < end
        index, position, end = index[live], position[live], end[live]
    result = Fields()
    for number_value, parts in found_varint.items():
        result.varint[number_value] = tuple(np.concatenate(column) for column in zip(*parts))
    for number_value, parts in found_length.items():
        result.length[number_value] = tuple(np.concatenate(column) for column in zip(*parts))
    return result
