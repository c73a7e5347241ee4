"""Type stub of the Perfetto protobuf codec (_perfetto_codec.pyx, compiled by Cython).

Buffers are typed memoryviews in the .pyx: any object with the buffer protocol and the
right item type (numpy arrays, pyarrow buffers) is accepted; ``_Buffer`` stands for them."""

from typing import Any

import numpy as np
import numpy.typing as npt

_Buffer = Any  # a C-contiguous buffer of the item type the .pyx names

class CodecError(ValueError):
    """A byte stream that is not a Perfetto trace this codec reads."""

ANNOTATIONS: tuple[str, ...]
COLUMNS: tuple[tuple[str, int, Any], ...]
ROW_HAS_PARENT: int
ROW_HAS_ARG: int
ROW_HAS_CATEGORY: int
ROW_ERROR: int
PACKET_LIMIT: int
TRACK_UUID: int
TRACK_PARENT_UUID: int
TRACK_PROCESS: int
TRACK_THREAD: int
PROCESS_PID: int
PROCESS_CMDLINE: int
PROCESS_NAME: int
PROCESS_LABELS: int
THREAD_PID: int
THREAD_TID: int
THREAD_NAME: int
DESCRIPTOR_SEQUENCE: int

def field_varint(number: int, value: int) -> bytes: ...
def field_bytes(number: int, data: str | bytes) -> bytes: ...  # str: encoded as UTF-8
def packet(body: bytes) -> bytes: ...
def thread_codes(
    pid: _Buffer, rank: _Buffer, tid: _Buffer, thread_name: _Buffer
) -> tuple[npt.NDArray[np.int32], list[Any], dict[Any, Any]]: ...
def encode(
    fd: int,
    header: bytes,
    buffer_size: int,
    start: _Buffer,
    duration: _Buffer,
    depth: _Buffer,
    span_id: _Buffer,
    parent_id: _Buffer,
    has_parent: _Buffer,
    arg: _Buffer,
    has_arg: _Buffer,
    error: _Buffer,
    flow_out: _Buffer,
    flow_in: _Buffer,
    name: _Buffer,
    category: _Buffer,
    thread: _Buffer,
    thread_name: _Buffer,
    own_name: _Buffer,
    names: list[Any],
    categories: list[Any],
    thread_names: list[Any],
    first_thread_uuid: int,
    progress: Any = None,
) -> Any: ...
def track_columns(
    track: _Buffer, pid: _Buffer, rank: _Buffer, tid: _Buffer, name: _Buffer
) -> list[Any]: ...  # four pyarrow.Buffer: int64, int32, int64, int32
def lookup_codes(iids: _Buffer, lookup: _Buffer, flags: _Buffer, flag: int) -> Any: ...
def parse_fields(data: bytes) -> list[tuple[int, int | bytes]]: ...
def _one(
    fields: list[tuple[int, int | bytes]], number: int, default: Any, kind: type | tuple[type, ...]
) -> Any: ...
def _signed(value: int) -> int: ...

class _Out:
    def __init__(self, fd: int, cap: int) -> None: ...
    def write(self, data: bytes) -> None: ...

class _Events:
    """The encoder's loop and its state (internal to ``encode``)."""

    def __init__(
        self,
        out: _Out,
        names: list[bytes],
        categories: list[bytes],
        thread_names: list[bytes],
        first_thread_uuid: int,
    ) -> None: ...

class Decoder:
    """Reads a trace block by block into span columns."""

    names: dict[Any, Any]
    categories: dict[Any, Any]
    annotation_names: dict[Any, Any]
    renamed: dict[Any, Any]
    processes: dict[Any, Any]
    threads: dict[Any, Any]
    offset: int
    our_packets: int  # read-only: the packets read by the fast path of our own layout
    def __init__(self, fast: bool = True) -> None: ...  # False: the general path only
    def read(self, fd: int, block_size: int, file_size: int) -> Any: ...
    def columns(self) -> dict[str, npt.NDArray[Any]]: ...
