"""Object proxies: one span per method call of a connection, client or loader, without
editing its class.

    conn = hotspan.wrap(sqlite3.connect("app.db"), category="db")
    conn.execute("select ...")             # a span "Connection.execute" [db]
    sock = hotspan.wrap(socket.create_connection(addr), category="net",
                        size=lambda args, kwargs, result: ...)   # arg: bytes moved

Works on methods written in C (``sqlite3.Connection``, ``socket.socket``) and on
``async def`` methods (the span covers the awaited call, not the coroutine's creation).
Attribute reads, writes and properties reach the object unchanged; so do ``with``,
``async with``, iteration, ``len`` and indexing (those are not recorded).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable
from typing import Any, Callable

from . import _native
from ._api import traced

__all__ = ["ObjectProxy", "wrap"]

SizeFn = Callable[[tuple[Any, ...], dict[str, Any], Any], "int | None"]

# Special methods looked up on the type (so __getattr__ never sees them), forwarded when the
# wrapped object's type has them. A result that is the object itself (``with conn as c``,
# ``iter(cursor)``) comes back as the proxy, so the calls made through it are still recorded.
_FORWARDED = (
    "__enter__",
    "__exit__",
    "__iter__",
    "__next__",
    "__len__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__contains__",
    "__call__",
    "__bool__",
)
_FORWARDED_ASYNC = ("__aenter__", "__aexit__", "__anext__")


class ObjectProxy:
    """The proxy ``wrap()`` returns; ``hotspan.proxy.target(p)`` gives the object back."""

    __slots__ = ("__dict__", "_hs_target", "_hs_class", "_hs_category", "_hs_size", "_hs_methods")

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not already cached in the proxy's __dict__ (see below).
        target = object.__getattribute__(self, "_hs_target")
        value = getattr(target, name)
        if not _is_method_of(value, target) or not _selected(self, name):
            return value  # data attributes and properties: read through every time
        wrapper = _record_calls(self, name, value)
        # Cached in the instance dict: the next ``proxy.name`` is a plain dict hit, and a
        # call costs the C wrapper's span enter/exit around the bound method, no allocation.
        object.__setattr__(self, name, wrapper)
        return wrapper

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.pop(name, None)  # a method cached under that name is stale now
        setattr(object.__getattribute__(self, "_hs_target"), name, value)

    def __delattr__(self, name: str) -> None:
        self.__dict__.pop(name, None)
        delattr(object.__getattribute__(self, "_hs_target"), name)

    def __dir__(self) -> list[str]:
        return dir(object.__getattribute__(self, "_hs_target"))

    def __repr__(self) -> str:
        return f"<hotspan proxy of {object.__getattribute__(self, '_hs_target')!r}>"


def _is_method_of(value: Any, target: Any) -> bool:
    """A method bound to this very object: Python (``def``/``async def``) or C."""
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
        return getattr(value, "__self__", None) is target
    return False


def _selected(proxy: ObjectProxy, name: str) -> bool:
    methods = object.__getattribute__(proxy, "_hs_methods")
    if methods is not None:
        return name in methods
    return not name.startswith("_")


def _record_calls(proxy: ObjectProxy, name: str, bound: Any) -> Any:
    span_name = f"{object.__getattribute__(proxy, '_hs_class')}.{name}"
    category = object.__getattribute__(proxy, "_hs_category")
    size = object.__getattribute__(proxy, "_hs_size")
    if size is None:
        # traced() builds the C wrapper (sync) or an async def around one cached span.
        return traced(name=span_name, category=category)(bound)
    return _sized(bound, span_name, category, size)


def _sized(bound: Any, span_name: str, category: str | None, size: SizeFn) -> Any:
    """A wrapper that also sets the span's ``arg`` to ``size(args, kwargs, result)``."""
    set_arg = _native._set_arg
    span = _native.span(span_name, category)

    def measured(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        try:
            n = size(args, kwargs, result)
        except Exception:  # noqa: BLE001 - a broken size function must not break the call
            return
        if n is not None:
            set_arg(int(n))

    if inspect.iscoroutinefunction(bound):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            with span:
                result = await bound(*args, **kwargs)
                measured(args, kwargs, result)
                return result

        return call_async

    def call(*args: Any, **kwargs: Any) -> Any:
        with span:
            result = bound(*args, **kwargs)
            measured(args, kwargs, result)
            return result

    return call


_proxy_types: dict[type, type] = {}


def _proxy_type(cls: type) -> type:
    """The proxy class for objects of ``cls``: ObjectProxy plus the special methods ``cls``
    has (a proxy of a socket must not pretend to be iterable)."""
    made = _proxy_types.get(cls)
    if made is not None:
        return made
    namespace: dict[str, Any] = {"__slots__": ()}
    for dunder in _FORWARDED:
        if hasattr(cls, dunder):
            namespace[dunder] = _forward(dunder)
    for dunder in _FORWARDED_ASYNC:
        if hasattr(cls, dunder):
            namespace[dunder] = _forward_async(dunder)
    if hasattr(cls, "__aiter__"):
        namespace["__aiter__"] = _forward("__aiter__")
    made = type(f"{cls.__name__}Proxy", (ObjectProxy,), namespace)
    _proxy_types[cls] = made
    return made


def _forward(dunder: str) -> Callable[..., Any]:
    def method(self: ObjectProxy, *args: Any) -> Any:
        target = object.__getattribute__(self, "_hs_target")
        result = getattr(type(target), dunder)(target, *args)
        return self if result is target else result

    method.__name__ = dunder
    return method


def _forward_async(dunder: str) -> Callable[..., Any]:
    async def method(self: ObjectProxy, *args: Any) -> Any:
        target = object.__getattribute__(self, "_hs_target")
        result = await getattr(type(target), dunder)(target, *args)
        return self if result is target else result

    method.__name__ = dunder
    return method


def wrap(
    obj: Any,
    category: str | None = "db",
    size: SizeFn | None = None,
    methods: Iterable[str] | None = None,
) -> Any:
    """A proxy of ``obj`` recording one span per method call, named ``ClassName.method``.

    ``category``: the spans' category. ``size(args, kwargs, result)``: the span's ``arg``
    (bytes moved, rows...; ``None`` leaves it unset). ``methods``: the names to record
    (default: every public method). ``async def`` methods are recorded around the awaited
    call. An exception marks the span as an error and propagates unchanged. Everything else
    (attributes, properties, ``with``, iteration) passes through to ``obj``.
    """
    if category is not None and not isinstance(category, str):
        raise TypeError(f"wrap(): category must be a str or None, not {type(category).__name__}")
    if size is not None and not callable(size):
        raise TypeError(
            f"wrap(): size must be callable(args, kwargs, result), not {type(size).__name__}"
        )
    chosen: frozenset[str] | None = None
    if methods is not None:
        if isinstance(methods, str):
            methods = [methods]
        chosen = frozenset(methods)
        for name in chosen:
            if not isinstance(name, str):
                raise TypeError(f"wrap(): methods must be names (str), not {type(name).__name__}")
            if not callable(getattr(obj, name, None)):
                raise AttributeError(f"wrap(): {type(obj).__name__} has no method {name!r}")
    if isinstance(obj, ObjectProxy):
        obj = target(obj)
    proxy: ObjectProxy = object.__new__(_proxy_type(type(obj)))
    object.__setattr__(proxy, "_hs_target", obj)
    object.__setattr__(proxy, "_hs_class", type(obj).__name__)
    object.__setattr__(proxy, "_hs_category", category)
    object.__setattr__(proxy, "_hs_size", size)
    object.__setattr__(proxy, "_hs_methods", chosen)
    return proxy


def target(proxy: ObjectProxy) -> Any:
    """The object a proxy wraps."""
    return object.__getattribute__(proxy, "_hs_target")
