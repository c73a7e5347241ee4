"""``hotspan.instrument("torch.distributed")``: each collective and point-to-point call as a
span of category ``comms``, named after the function, with ``arg`` = the bytes this rank
sends, so that ``hotspan.stats`` gives the bandwidth of each collective (``arg_per_s``).

Bytes sent (``arg``), per function: the bytes of the tensors this rank hands to the call,
whatever algorithm the backend then uses (a ring all-reduce moves about 2(n-1)/n of them
each way; the count here does not depend on the backend):

=========================  ======================================================
``all_reduce``             ``tensor``'s bytes
``all_gather``             ``tensor``'s bytes (the input; not the gathered list)
``all_gather_into_tensor`` ``input_tensor``'s bytes (``all_gather_single`` too)
``reduce_scatter``         the sum of ``input_list``'s bytes
``reduce_scatter_tensor``  ``input``'s bytes (``reduce_scatter_single`` too)
``reduce`` / ``gather``    ``tensor``'s bytes (every rank sends its own)
``broadcast``              ``tensor``'s bytes on the source rank, 0 on the others
``all_to_all``             the sum of ``input_tensor_list``'s bytes
``all_to_all_single``      ``input``'s bytes
``send`` / ``isend``       ``tensor``'s bytes
``recv`` / ``irecv``       0 (this rank sends nothing)
``barrier``                0
=========================  ======================================================

A tensor's bytes are ``numel() * element_size()`` (``Tensor.nbytes``).

Process group and sequence number. A collective's category is ``comms:GROUP``:
``comms:world`` on the default group, ``comms:NAME`` on a group from ``new_group``: torch's
group name (``1``, ``2``: the same on every member, as groups are made in the same order on
every rank), after its ``group_desc`` where one was given (``comms:tp.2``). Its sequence number is its
place among the collectives this rank called on that group (every name together): torch
requires every member to call a group's collectives in one order, so the k-th collective of
a group on each member is one instance; ``hotspan.collectives`` matches them so, and says
where the members disagree (a rank that skipped one). Point-to-point calls (``send``,
``recv``, ``isend``, ``irecv``) keep ``comms``; a call on a group this rank is not in
(torch does nothing) is recorded as ``comms.nonmember``, no collective.

A call with ``async_op=True`` (and every ``isend``/``irecv``) returns a handle whose span
ends when the handle's ``wait()`` or ``synchronize()`` returns, or when ``is_completed()``
first answers True, on the thread that issued the call (the usual case). Handles waited
in any order are fine. A handle waited on another thread, or dropped without a wait, ends
its span the next time the issuing thread enters one of these functions (its end is then
late: a span can only be closed on the thread that opened it).
Functions the installed torch lacks are skipped. Only the functions in
``torch.distributed``'s namespace are replaced: torch's own helpers
that call them internally (``all_gather_object``, DDP's buckets) are not recorded.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

from .._native import span as _span

__all__ = [
    "ALWAYS_ASYNC",
    "CATEGORY",
    "COLLECTIVES",
    "Collective",
    "P2P",
    "TracedWork",
    "WORLD",
    "install",
    "uninstall",
]

CATEGORY = "comms"
#: the default group's collectives
WORLD = f"{CATEGORY}:world"
#: point-to-point calls are no collective of their group: plain ``comms``
P2P = frozenset({"send", "isend", "recv", "irecv"})

# function -> the parameter holding what this rank sends (None: it sends nothing)
COLLECTIVES: dict[str, str | None] = {
    "all_reduce": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "all_gather_single": "input_tensor",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "reduce_scatter_single": "input",
    "reduce": "tensor",
    "gather": "tensor",
    "broadcast": "tensor",  # only on the source rank
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "send": "tensor",
    "isend": "tensor",
    "recv": None,
    "irecv": None,
    "barrier": None,
}
ALWAYS_ASYNC = frozenset({"isend", "irecv"})

_originals: dict[str, Callable[..., Any]] = {}

# Spans of handles waited on another thread than the one that issued them, by issuing
# thread: closed there at its next instrumented call (a span can only end on its own thread).
_orphans: dict[int, list[Any]] = {}
_orphans_lock = threading.Lock()


def _nbytes(value: Any) -> int:
    # Tensor.nbytes is numel() * element_size() in one call (half the cost of the two)
    if isinstance(value, (list, tuple)):
        return sum(v.nbytes for v in value)
    nbytes: int = value.nbytes
    return nbytes


class _Param:
    """Reads one parameter of a call from its args/kwargs, by the signature's position."""

    __slots__ = ("name", "index", "default")

    def __init__(self, sig: inspect.Signature, name: str):
        self.name = name
        params = list(sig.parameters.values())
        names = [p.name for p in params]
        if name in names:
            p = params[names.index(name)]
            self.index = (
                names.index(name)
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                else None
            )
            self.default = None if p.default is p.empty else p.default
        else:
            self.index, self.default = None, None

    def get(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.index is not None and self.index < len(args):
            return args[self.index]
        return kwargs.get(self.name, self.default)


# group object -> (the group, its category): the group kept so that its id stays its own
_categories: dict[int, tuple[Any, str]] = {}


def _category(group: Any, dist: Any) -> str:
    """``comms:GROUP`` for a collective on ``group`` (None: the default group)."""
    found = _categories.get(id(group))
    if found is not None and found[0] is group:
        return found[1]
    category = _group_category(group, dist)
    _categories[id(group)] = (group, category)
    return category


def _group_category(group: Any, dist: Any) -> str:
    try:
        if group is None or group is dist.GroupMember.WORLD:
            return WORLD
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            return f"{CATEGORY}.nonmember"
        from torch.distributed import distributed_c10d as c10d

        label = str(c10d._get_process_group_name(group))
        desc = getattr(group, "group_desc", None)
        if desc and desc not in ("undefined", "default_pg"):
            label = f"{desc}.{label}".replace("/", "_")
        return f"{CATEGORY}:{label}"
    except Exception:  # noqa: BLE001 -- a torch without these: the group unnamed, still a collective
        return f"{CATEGORY}:{id(group):x}"


def _close_orphans() -> None:
    with _orphans_lock:
        spans = _orphans.pop(threading.get_ident(), ())
    for sp in spans:
        sp.__exit__(None, None, None)


class TracedWork:
    """A collective's async handle whose span ends when it is waited.

    Everything but ``wait``, ``synchronize`` and ``is_completed`` goes to the torch handle,
    which ``unwrap()`` returns.
    """

    __slots__ = ("_work", "_span", "_thread")

    def __init__(self, work: Any, span: Any):
        self._work = work
        self._span = span
        self._thread = threading.get_ident()

    def unwrap(self) -> Any:
        return self._work

    def _finish(self) -> None:
        sp = self._span
        if sp is None:
            return
        self._span = None
        if threading.get_ident() == self._thread:
            sp.__exit__(None, None, None)
        else:
            with _orphans_lock:
                _orphans.setdefault(self._thread, []).append(sp)

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._finish()

    def synchronize(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._work.synchronize(*args, **kwargs)
        finally:
            self._finish()

    def __del__(self) -> None:
        # dropped unwaited (or garbage-collected on another thread): don't leave the frame
        # open on the issuing thread's stack, where it would parent every later span
        self._finish()

    def is_completed(self) -> bool:
        done: bool = self._work.is_completed()
        if done:
            self._finish()
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)

    def __repr__(self) -> str:
        return f"<hotspan TracedWork of {self._work!r}>"


def _make_wrapper(fname: str, original: Callable[..., Any], dist: Any) -> Callable[..., Any]:
    sig = inspect.signature(original)
    payload_name = COLLECTIVES[fname]
    payload = _Param(sig, payload_name) if payload_name else None
    async_op = _Param(sig, "async_op")
    always_async = fname in ALWAYS_ASYNC
    span = _span
    group_param = _Param(sig, "group")
    p2p = fname in P2P

    if fname == "broadcast":
        assert payload is not None  # COLLECTIVES names broadcast's "tensor"
        broadcast_payload = payload
        src, group, group_src = _Param(sig, "src"), _Param(sig, "group"), _Param(sig, "group_src")

        def sent(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
            gsrc = group_src.get(args, kwargs)
            if gsrc is not None:
                is_source = dist.get_rank(group.get(args, kwargs)) == gsrc
            else:
                is_source = dist.get_rank() == src.get(args, kwargs)
            return _nbytes(broadcast_payload.get(args, kwargs)) if is_source else 0

    elif payload is not None:

        def sent(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
            return _nbytes(payload.get(args, kwargs))

    else:

        def sent(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
            return 0

    def call(*args: Any, **kwargs: Any) -> Any:
        if _orphans:
            _close_orphans()
        try:
            nbytes = sent(args, kwargs)
        except Exception:  # noqa: BLE001 -- arguments torch itself will refuse: let it say why, below
            nbytes = None
        if p2p:
            category = CATEGORY
        else:
            group = group_param.get(args, kwargs)
            category = WORLD if group is None else _category(group, dist)
        sp = span(fname, category, arg=nbytes)
        if not (always_async or async_op.get(args, kwargs)):
            with sp:
                return original(*args, **kwargs)
        sp.__enter__()
        try:
            work = original(*args, **kwargs)
        except BaseException as exc:
            sp.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if work is None:  # not in the group, or queued in a coalescing batch: no handle
            sp.__exit__(None, None, None)
            return None
        return TracedWork(work, sp)

    return Collective(fname, original, call)


class Collective:
    """A recording stand-in for a ``torch.distributed`` function.

    It compares equal to (and hashes like) the function it wraps: torch checks
    ``op in [isend, irecv]`` (``P2POp``), which must keep holding once instrumented.
    """

    # no __slots__: __doc__ is per instance (the wrapped function's), which slots forbid

    def __init__(self, name: str, original: Callable[..., Any], call: Callable[..., Any]):
        self.__name__ = self.__qualname__ = name
        self.__doc__ = original.__doc__
        self.__wrapped__ = original
        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return (
            other is self
            or other is self.__wrapped__
            or (isinstance(other, Collective) and other.__wrapped__ is self.__wrapped__)
        )

    def __hash__(self) -> int:
        return hash(self.__wrapped__)

    def __repr__(self) -> str:
        return f"<hotspan-recorded torch.distributed.{self.__name__}>"


def install() -> None:
    import torch.distributed as dist

    for fname in COLLECTIVES:
        original = getattr(dist, fname, None)
        if original is None:  # an older torch without it
            continue
        _originals[fname] = original
        setattr(dist, fname, _make_wrapper(fname, original, dist))


def uninstall() -> None:
    import torch.distributed as dist

    for fname, original in _originals.items():
        setattr(dist, fname, original)
    _originals.clear()
    _categories.clear()
