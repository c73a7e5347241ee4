"""Telling a file system URI from a local path, and showing one without its credentials.

pyarrow-free: the recorder decides what its destination is before anything loads pyarrow.
"""

from __future__ import annotations

import os
import re

__all__ = ["FS_SCHEMES", "is_uri", "local_path", "redact_uri"]

#: The schemes ``pyarrow.fs.FileSystem.from_uri`` opens (local, S3, Google Cloud Storage,
#: HDFS, Azure; ``mock`` is pyarrow's in-memory one).
FS_SCHEMES = frozenset(
    {"file", "local", "mock", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"}
)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: Query keys whose values are never shown (credentials passed in a URI's query).
_SECRET_KEYS = re.compile(
    r"secret|token|key|password|passwd|credential|sig|session|auth", re.IGNORECASE
)


def scheme_of(path: str | os.PathLike[str]) -> str | None:
    """The scheme of a URI (lower case), None for a plain path."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    match = _SCHEME.match(text)
    return match.group(1).lower() if match else None


def is_uri(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a file system by URI (``s3://...``, ``file:///...``) rather than a
    local path; ``grpc://`` (a collector) is not a file system."""
    scheme = scheme_of(path)
    return scheme is not None and not scheme.startswith("grpc")


def local_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a string, a leading ``~`` or ``~user`` expanded as the shell (and pandas)
    would: ``load("~/runs/a")`` reads the home folder's run, not a folder named ``~``. A URI
    (``s3://...``, ``grpc://...``) is left as it is."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = text.decode(errors="surrogateescape")
    return os.path.expanduser(text)  # a leading ~ only: a URI never starts with one


def redact_uri(text: str | os.PathLike[str]) -> str:
    """``text`` fit to print: a URI's user info (``s3://KEY:SECRET@bucket``) and the values of
    secret-looking query keys (``?secret_key=...``) replaced by ``***``."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    text = os.fspath(text)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not is_uri(text):
        return text
    try:
        parts = urlsplit(text)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return text.split("://", 1)[0] + "://***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    shown_query = urlencode(
        [(k, "***" if _SECRET_KEYS.search(k) else v) for k, v in query], safe="*:/"
    )
    return urlunsplit((parts.scheme, netloc, parts.path, shown_query, parts.fragment))
