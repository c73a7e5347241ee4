"""instrument()/uninstrument() and hotspan.sync without the frameworks' help: names,
errors, laziness."""

from __future__ import annotations

import pytest

import hotspan
from _util import run_python


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown integration 'jax'.*known: mlx, torch\.distributed"
    ):
        hotspan.instrument("jax")
    with pytest.raises(ValueError, match="known: mlx, torch.distributed"):
        hotspan.uninstrument("torch")
    with pytest.raises(TypeError):
        hotspan.instrument(None)


def test_a_missing_framework_says_what_to_install():
    # a None entry in sys.modules makes the import fail as if the package were absent
    r = run_python(
        """
        import sys
        sys.modules["mlx"] = None
        sys.modules["torch"] = None
        import hotspan
        for name, framework in (("mlx", "mlx"), ("torch.distributed", "torch")):
            try:
                hotspan.instrument(name)
            except ImportError as e:
                assert f"needs {framework}" in str(e) and "pip install" in str(e), str(e)
            else:
                raise SystemExit(f"{name}: no ImportError")
            assert hotspan.instrumentation.instrumented() == frozenset()
        for fn, package in ((hotspan.sync.mlx, "MLX"), (hotspan.sync.cuda, "PyTorch")):
            try:
                fn()
            except ImportError as e:
                assert package in str(e) and "pip install" in str(e), str(e)
            else:
                raise SystemExit(f"{fn}: no ImportError")
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.slow
def test_sync_is_a_submodule_and_imports_nothing_heavy():
    r = run_python(
        """
        import sys, types
        import hotspan
        assert isinstance(hotspan.sync, types.ModuleType)
        import hotspan.sync as s
        assert s is hotspan.sync and callable(s.mlx) and callable(s.cuda)
        hotspan.instrument, hotspan.uninstrument
        heavy = [m for m in ("pyarrow", "numpy", "torch", "mlx") if m in sys.modules]
        assert not heavy, heavy
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_sync_cuda_without_cuda_is_a_clear_error():
    torch = pytest.importorskip(
        "torch", reason="torch is not installed: pip install '.[dist-test]'"
    )
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the error path does not apply")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        hotspan.sync.cuda()
