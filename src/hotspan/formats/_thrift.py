"""Just enough of Thrift's compact protocol to read a Parquet footer, move its offsets and
write it back (parquet.py joins row groups written on two threads into one file).

A struct is a list of ``[field_id, type, value]``; a list or set is ``(element_type,
[values])``; a map ``(key_type, value_type, [(k, v), ...])``. Booleans in a struct carry
their value in the type (1 true, 2 false), as the protocol does.
"""

from __future__ import annotations

import struct
from typing import Any

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ValueError("bad varint")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int) -> Any:
        if kind in (TRUE, FALSE):  # a bool element of a list or map: one byte
            return self.byte() == 1
        if kind == BYTE:
            return self.byte()
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            (v,) = struct.unpack_from("<d", self.data, self.pos)
            self.pos += 8
            return v
        if kind == BINARY:
            n = self.varint()
            v = self.data[self.pos : self.pos + n]
            self.pos += n
            return v
        if kind in (LIST, SET):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return (element, [self.value(element) for _ in range(size)])
        if kind == MAP:
            size = self.varint()
            if not size:
                return (0, 0, [])
            types = self.byte()
            k, v = types >> 4, types & 0x0F
            return (k, v, [(self.value(k), self.value(v)) for _ in range(size)])
        if kind == STRUCT:
            return self.struct()
        raise ValueError(f"unknown thrift type {kind}")

    def struct(self) -> list[list[Any]]:
        fields: list[list[Any]] = []
        last = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == STOP:
                return fields
            delta = header >> 4
            field_id = last + delta if delta else self.zigzag()
            value = None if kind in (TRUE, FALSE) else self.value(kind)
            fields.append([field_id, kind, value])
            last = field_id


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            if n < 0x80:
                self.out.append(n)
                return
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, kind: int, v: Any) -> None:
        if kind in (TRUE, FALSE):
            self.out.append(1 if v else 2)
        elif kind == BYTE:
            self.out.append(v & 0xFF)
        elif kind in (I16, I32, I64):
            self.zigzag(v)
        elif kind == DOUBLE:
            self.out += struct.pack("<d", v)
        elif kind == BINARY:
            self.varint(len(v))
            self.out += v
        elif kind in (LIST, SET):
            element, items = v
            if len(items) < 15:
                self.out.append((len(items) << 4) | element)
            else:
                self.out.append(0xF0 | element)
                self.varint(len(items))
            for item in items:
                self.value(element, item)
        elif kind == MAP:
            k, vt, items = v
            self.varint(len(items))
            if items:
                self.out.append((k << 4) | vt)
                for key, value in items:
                    self.value(k, key)
                    self.value(vt, value)
        elif kind == STRUCT:
            self.struct(v)
        else:
            raise ValueError(f"unknown thrift type {kind}")

    def struct(self, fields: list[list[Any]]) -> None:
        last = 0
        for field_id, kind, value in fields:
            delta = field_id - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | kind)
            else:
                self.out.append(kind)
                self.zigzag(field_id)
            if kind not in (TRUE, FALSE):
                self.value(kind, value)
            last = field_id
        self.out.append(STOP)


def read_struct(data: bytes) -> list[list[Any]]:
    return _Reader(data).struct()


def write_struct(fields: list[list[Any]]) -> bytes:
    w = _Writer()
    w.struct(fields)
    return bytes(w.out)


def field(fields: list[list[Any]], field_id: int) -> list[Any] | None:
    """The ``[id, type, value]`` entry of a struct, or None."""
    for entry in fields:
        if entry[0] == field_id:
            return entry
    return None


def required_field(fields: list[list[Any]], field_id: int) -> list[Any]:
    """The ``[id, type, value]`` entry of a field the format requires (a Parquet footer's
    row groups, columns, row counts)."""
    entry = field(fields, field_id)
    if entry is None:
        raise ValueError(f"thrift struct without its required field {field_id}")
    return entry
