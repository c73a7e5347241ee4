"""Type stub of the Chrome JSON codec (_chrome_codec.pyx, compiled by Cython).

Buffers are typed memoryviews in the .pyx: any object with the buffer protocol and the
right item type (numpy arrays, pyarrow buffers) is accepted; ``_Buffer`` stands for them."""

from typing import Any

import numpy as np
import numpy.typing as npt

from ._base import TraceFileError as TraceFileError

_Buffer = Any  # a C-contiguous buffer of the item type the .pyx names

FLAG_PARENT: int
FLAG_ARG: int
FLAG_ERROR: int
FLAG_SPAN_ID: int
#: bytes the reader may read past the data it is fed (a NUL first): feed() needs them
PAD: int

def thread_codes(
    pid: _Buffer, rank: _Buffer, tid: _Buffer, thread_name: _Buffer
) -> tuple[npt.NDArray[np.int32], list[Any], dict[Any, Any]]: ...
def encode(
    sink: int | Any,
    buffer_size: int,
    start: _Buffer,
    duration: _Buffer,
    depth: _Buffer,
    span_id: _Buffer,
    parent_id: _Buffer,
    parent_valid: _Buffer,
    arg: _Buffer,
    arg_valid: _Buffer,
    error: _Buffer,
    thread: _Buffer,
    name: _Buffer,
    category: _Buffer,
    thread_name: _Buffer,
    thread_texts: list[bytes],
    name_texts: list[bytes],
    category_texts: list[bytes],
    thread_name_texts: list[bytes],
    origin: int,
    progress: Any = None,
    flow_out: Any = None,
    flow_in: Any = None,
    own_name: _Buffer | None = None,
) -> None: ...
def nest(
    thread: _Buffer,
    start: _Buffer,
    end: _Buffer,
    parent_id: _Buffer,
    depth: _Buffer,
    has_parent: _Buffer,
) -> Any: ...

class _Texts:
    def __init__(self, items: list[bytes]) -> None: ...

class Strings:
    """Distinct strings and their codes, looked up by their UTF-8 bytes."""

    values: list[str]
    def __init__(self) -> None: ...
    def code_of(self, text: str) -> int: ...

class Column:
    """A growable buffer of fixed-size items in pages of its own, handed to numpy without a
    copy (it has the buffer protocol)."""

    @property
    def data(self) -> memoryview: ...
    def __init__(self, itemsize: int) -> None: ...

def fresh_column(n: int, itemsize: int) -> Column: ...

class MappedText:
    """A regular file's first ``length`` bytes mapped (not copied), a NUL and padding after
    them, for :meth:`Reader.feed_text`."""

    length: int
    @property
    def cut(self) -> bool: ...
    def __init__(self, fd: int, length: int) -> None: ...
    def close(self) -> None: ...

class Reader:
    """Streaming parser of one Chrome JSON document."""

    c_thread: Column
    c_start: Column
    c_end: Column
    c_name: Column
    c_category: Column
    c_thread_name: Column
    c_span_id: Column
    c_parent_id: Column
    c_depth: Column
    c_arg: Column
    c_rank: Column
    c_flags: Column
    n: int
    own_rows: int
    rank_live: bool
    thread_name_live: bool
    open_rows: int
    rows_without_category: int
    rows_without_span_id: int
    names: Strings
    categories: Strings
    thread_names: Strings
    ids: Strings
    thread_index: dict[Any, int]
    thread_keys: list[Any]
    async_open: dict[Any, Any]
    async_tracks: set[int]
    array_form: bool
    saw_events: bool
    events: int
    top: dict[str, Any]
    metadata_events: list[Any]
    counts: dict[str, int]
    first_bad: Any
    path: Any
    def __init__(self, path: Any, rows: int = 4096) -> None: ...
    def feed(self, data: bytearray, length: int, offset: int, eof: bool) -> int: ...
    def feed_text(self, text: MappedText) -> int: ...
    def finish(self) -> None: ...
