"""How the timeline's index is kept on disk (see :mod:`hotspan.analysis._timeline_index`): an
uncompressed ``.npz`` file written member by member and memory-mapped back, and tables of
rows inside it as Arrow IPC bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "decoded_table",
    "from_ipc_bytes",
    "ipc_bytes",
    "mapped_npz",
    "release_mapped",
    "trim_heap",
    "write_npz",
]


def write_npz(out: Any, arrays: dict[str, np.ndarray | list[np.ndarray]]) -> None:
    """An uncompressed ``.npz`` file, as ``np.savez`` writes it (``np.load`` reads it), where a
    member given as a list of arrays is written as their concatenation, piece by piece."""
    import zipfile

    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            pieces = value if isinstance(value, list) else [value]
            pieces = [np.ascontiguousarray(piece) for piece in pieces]
            shape = (sum(len(p) for p in pieces), *pieces[0].shape[1:]) if pieces[0].ndim else ()
            header: dict[str, Any] = {
                "descr": np.lib.format.dtype_to_descr(pieces[0].dtype),
                "fortran_order": False,
                "shape": shape,
            }
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_2_0(member, header)
                for piece in pieces:
                    member.write(piece.tobytes() if piece.ndim == 0 else piece.data)


def mapped_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz`` file (as ``np.savez`` writes it), memory-mapped
    read-only: reading an index back costs no copy of its hundreds of MB (``np.load`` reads
    and checks each member whole), and only the pages a view touches are read."""
    import struct
    import zipfile

    out: dict[str, np.ndarray] = {}
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{path}: not an index") from None
    with archive, open(path, "rb") as raw:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{path}: not an index ({info.filename})")
            raw.seek(info.header_offset)
            local = raw.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ValueError(f"{path}: not an index")
            name_length, extra_length = struct.unpack("<HH", local[26:30])
            raw.seek(info.header_offset + 30 + name_length + extra_length)
            major, _minor = np.lib.format.read_magic(raw)
            read_header = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(raw)
            if dtype.hasobject:
                raise ValueError(f"{path}: not an index (objects)")
            count = int(np.prod(shape)) if shape else 1
            offset = raw.tell()
            if count == 0:
                array = np.zeros(shape, dtype)
            else:
                array = np.memmap(
                    path, dtype, "r", offset=offset, shape=shape, order="F" if fortran else "C"
                )
            out[info.filename[: -len(".npy")]] = np.asarray(array)
    return out


def release_mapped(arrays: list[np.ndarray]) -> None:
    """Give back the pages of memory-mapped ``arrays`` (of :func:`mapped_npz`) that were
    read: they stay in the page cache and are mapped again when read again, but no longer
    count in the process's resident memory (every page a server's views ever touched did)."""
    import mmap

    for array in arrays:
        mapped = getattr(array.base, "_mmap", None)
        if isinstance(mapped, mmap.mmap):
            mapped.madvise(mmap.MADV_DONTNEED)


def trim_heap() -> None:
    """Give the memory freed so far back to the system: Arrow's pool's unused pages, and the C
    heap's free pages (glibc's ``malloc_trim``; elsewhere nothing). A build frees hundreds of
    MB of small arrays between its passes, which the heap otherwise keeps counted as its own."""
    import ctypes
    import ctypes.util

    pa.default_memory_pool().release_unused()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def decoded_table(table: pa.Table) -> pa.Table:
    """``table`` with dictionary columns decoded (parts may encode ``name`` either way)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    return table


def ipc_bytes(tables: list[pa.Table]) -> np.ndarray:
    """``tables`` as one Arrow IPC stream's bytes (empty: no tables)."""
    if not tables:
        return np.zeros(0, np.uint8)
    table = pa.concat_tables(tables, promote_options="permissive")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return np.frombuffer(sink.getvalue(), np.uint8)


def from_ipc_bytes(data: np.ndarray) -> pa.Table | None:
    if not len(data):
        return None
    return pa.ipc.open_stream(pa.py_buffer(data.tobytes())).read_all()
