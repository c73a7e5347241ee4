"""The API tells itself (issue 32, item 5): the public functions that load their
implementation on first call (so that ``import hotspan`` loads no pyarrow) show that
implementation's real parameters to ``inspect.signature``, ``help`` and an IDE, before any
call, and never drift from it."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import hotspan

#: Each public forwarding function and the implementation it loads on call.
FORWARDED = {
    "export": "hotspan.formats:export",
    "load": "hotspan.formats:load",
    "stats": "hotspan.analysis._api:stats",
    "phases": "hotspan.analysis._api:phases",
    "compare": "hotspan.analysis._api:compare",
    "collectives": "hotspan.analysis.ranks:collectives",
    "stragglers": "hotspan.analysis.ranks:stragglers",
    "critical_path": "hotspan.analysis.ranks:critical_path",
    "live": "hotspan.recording.live_log:live",
    "subscribe": "hotspan.recording.subscribers:subscribe",
    "wrap": "hotspan.proxy:wrap",
    "instrument": "hotspan.instrumentation:instrument",
    "uninstrument": "hotspan.instrumentation:uninstrument",
    "snapshot": "hotspan.recording.flight:snapshot",
    "SpanFilter": "hotspan.analysis.filters:SpanFilter",
    "display": "hotspan.notebook:display",
    "load_ipython_extension": "hotspan.notebook:load_ipython_extension",
    "unload_ipython_extension": "hotspan.notebook:unload_ipython_extension",
}

VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def implementation(name: str):
    module, _, attr = FORWARDED[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def shape(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults: what a caller can pass (annotations are written per module)."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize("name", sorted(FORWARDED))
def test_a_forwarding_function_has_its_implementation_s_signature(name):
    public = inspect.signature(getattr(hotspan, name))
    assert shape(public) == shape(inspect.signature(implementation(name)))
    assert not any(p.kind in VARIADIC for p in public.parameters.values()), public


def test_every_public_callable_names_its_parameters():
    """No bare ``*args``/``**options`` anywhere in ``hotspan.__all__``, and a signature for
    every function (the C ones through their text signatures)."""
    for name in hotspan.__all__:
        obj = getattr(hotspan, name)
        if not callable(obj) or name == "traced_function":  # a type made by traced
            continue
        signature = inspect.signature(obj)  # raises for a C function without a text signature
        assert not any(p.kind in VARIADIC for p in signature.parameters.values()), (name, signature)


def test_help_shows_the_parameters():
    import pydoc

    text = pydoc.render_doc(hotspan.stats, renderer=pydoc.plaintext)
    assert "stats(spans" in text and "by" in text and "filter" in text and "engine" in text
    assert "*args" not in text and "**options" not in text
    text = pydoc.render_doc(hotspan.compare, renderer=pydoc.plaintext)
    assert re.search(r"threshold(: '\w+')? = 0\.05", text), text
    assert "**options" not in text


def test_signatures_need_no_call_and_load_no_pyarrow():
    """In a fresh interpreter: every signature read before any call, pyarrow still unloaded."""
    code = textwrap.dedent(
        f"""
        import inspect, json, sys
        import hotspan
        names = {sorted(FORWARDED)!r}
        found = {{n: list(inspect.signature(getattr(hotspan, n)).parameters) for n in names}}
        print(json.dumps({{"params": found, "heavy": sorted(
            m for m in ("pyarrow", "numpy") if m in sys.modules)}}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["heavy"] == []
    assert result["params"]["stats"] == ["spans", "by", "filter", "engine"]
    assert result["params"]["load"] == ["path", "format", "check", "run"]


def test_the_reference_documents_the_public_objects():
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "reference" / "python-api.md").read_text()
    documented = set(re.findall(r"^::: (\S+)", page, re.M))
    for name in FORWARDED:
        if not name.endswith("load_ipython_extension"):  # %load_ext's hooks: the notebooks guide
            assert f"hotspan.{name}" in documented, name
    for private in ("hotspan.analysis.statistics.stats", "hotspan.formats.load"):
        assert private not in documented
