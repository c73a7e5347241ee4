"""Record a framework's calls as spans without touching user code.

    hotspan.instrument("torch.distributed")   # every collective: "comms:GROUP" (send/recv: "comms")
    hotspan.instrument("mlx")                 # mx.eval / async_eval / synchronize: "mlx"
    ...
    hotspan.uninstrument("torch.distributed")

Each integration replaces functions in the framework's public module (``torch.distributed``,
``mlx.core``) with recording wrappers, and ``uninstrument`` puts the originals back. Code
that bound a function before ``instrument`` (``from torch.distributed import all_reduce``)
keeps the unwrapped one: instrument first, or call through the module.

The framework is imported by ``instrument`` (not by ``import hotspan``).
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

__all__ = ["KNOWN", "instrument", "instrumented", "uninstrument"]

#: name accepted by instrument() -> (module implementing install/uninstall, what to pip install)
KNOWN: dict[str, tuple[str, str]] = {
    "torch.distributed": ("hotspan.instrumentation._torch_distributed", "torch"),
    "mlx": ("hotspan.instrumentation._mlx", "'mlx[cpu]' on Linux, mlx on macOS"),
}

_lock = threading.Lock()
_active: set[str] = set()


def _integration(name: object) -> ModuleType:
    if not isinstance(name, str):
        raise TypeError(f"instrument(): the name must be a str, not {type(name).__name__}")
    if name not in KNOWN:
        raise ValueError(
            f"instrument(): unknown integration {name!r}; known: {', '.join(sorted(KNOWN))}"
        )
    return importlib.import_module(KNOWN[name][0])


def instrument(name: str) -> None:
    """Wrap the integration ``name``'s functions with spans (a no-op when already on).

    Known names are the keys of ``KNOWN``: ``"torch.distributed"``, ``"mlx"``. Raises
    ``ValueError`` for another name, and ``ImportError`` when the framework is not installed.
    """
    module = _integration(name)
    with _lock:
        if name in _active:
            return
        try:
            module.install()
        except ImportError as err:
            raise ImportError(
                f"hotspan.instrument({name!r}) needs {name.split('.')[0]}, which is not importable ({err}); "
                f"install it with: pip install {KNOWN[name][1]}"
            ) from err
        _active.add(name)


def uninstrument(name: str) -> None:
    """Put back the functions ``instrument(name)`` replaced (a no-op when not instrumented)."""
    module = _integration(name)
    with _lock:
        if name not in _active:
            return
        module.uninstall()
        _active.discard(name)


def instrumented() -> frozenset[str]:
    """The integrations now on."""
    with _lock:
        return frozenset(_active)
