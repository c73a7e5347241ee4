"""Ready-made device synchronisations: call one at the end of a span's body so the span
covers the device work its body started, not just the launch.

    with hotspan.span("matmul", "mlx"):
        y = a @ b
        mx.async_eval(y)
        hotspan.sync.mlx()      # the span now ends when the matmul has run

Each imports its framework on its first call only, so ``import hotspan.sync`` costs
nothing and a program that never calls ``cuda()`` never loads torch.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing loads for the type checker only: import hotspan stays light
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["cuda", "mlx"]

# The framework's own synchronise function, found on the first call (a module global:
# later calls pay one global lookup and one test, no import machinery).
_mlx_sync: Callable[[], None] | None = None
_cuda_sync: Callable[[], None] | None = None


def _missing(framework: str, package: str, err: ImportError) -> ImportError:
    return ImportError(
        f"hotspan.sync.{framework}() needs {package}, which is not installed ({err})"
    )


def mlx() -> None:
    """Wait for the work already scheduled on MLX's streams (``mlx.core.synchronize()``).

    A span whose body starts the work with ``mx.async_eval(y)`` and ends with this call
    covers the work itself.
    """
    global _mlx_sync
    fn = _mlx_sync
    if fn is None:
        try:
            import mlx.core as mx
        except ImportError as err:
            raise _missing(
                "mlx", "MLX (pip install 'mlx[cpu]' on Linux, mlx on macOS)", err
            ) from err
        fn = mx.synchronize
        # hotspan.instrument("mlx") may have wrapped it: synchronise without recording a
        # second, nested "synchronize" span.
        fn = _mlx_sync = getattr(fn, "_hotspan_original", fn)
    fn()


def cuda() -> None:
    """Wait for all work queued on the current torch CUDA device (``torch.cuda.synchronize()``)."""
    global _cuda_sync
    fn = _cuda_sync
    if fn is None:
        try:
            import torch
        except ImportError as err:
            raise _missing("cuda", "PyTorch (pip install torch)", err) from err
        if not torch.cuda.is_available():
            raise RuntimeError(
                "hotspan.sync.cuda(): CUDA is not available to torch (no GPU, or a CPU build of torch)"
            )
        fn = _cuda_sync = torch.cuda.synchronize
    fn()
