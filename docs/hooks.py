"""MkDocs hooks: the references that are generated from the code at build time.

- ``<!-- hotspan:cli-reference -->``: every command's ``--help``, from the argparse parsers
  the ``hotspan`` command itself builds;
- ``<!-- hotspan:rest-reference -->``: every route of ``hotspan serve``, from the OpenAPI
  document its FastAPI application publishes at ``/openapi.json``;
- the nav's Guides section: every ``docs/guides/*.md`` the nav does not name yet is added to
  it, titled by its first heading, so a new guide is never left out of the site.

So neither reference can drift from the code: a new option or route appears on the next build.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

CLI_MARK = "<!-- hotspan:cli-reference -->"
REST_MARK = "<!-- hotspan:rest-reference -->"


def cli_reference() -> str:
    from hotspan.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps help to this width
    parser = build_parser()
    out = ["## hotspan", "", "```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [f"## hotspan {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def _schema_type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " / ".join(f"`{v}`" for v in schema["enum"])
    return schema.get("type", "object")


def rest_reference() -> str:
    from hotspan.serve.app import create_app

    with tempfile.TemporaryDirectory() as root:
        spec = create_app(root).openapi()
    out = [f"OpenAPI {spec.get('openapi', '')}, `{spec['info']['title']}` {spec['info']['version']}.", ""]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out += [f"## `{method.upper()} {path}`", ""]
            if op.get("description") or op.get("summary"):
                out += [(op.get("description") or op.get("summary")).strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | type | default | description |",
                        "| --- | --- | --- | --- | --- | --- |"]
                for p in params:
                    schema = p.get("schema", {})
                    default = schema.get("default", "")
                    description = (p.get("description") or schema.get("description") or "").replace("|", "\\|")
                    out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                               f"{_schema_type(schema)} | {'' if default == '' else f'`{default}`'} | "
                               f"{description} |")
                out.append("")
            responses = op.get("responses", {})
            if responses:
                out += ["| status | meaning |", "| --- | --- |"]
                for status, response in responses.items():
                    out.append(f"| {status} | {response.get('description', '').replace('|', '/')} |")
                out.append("")
    return "\n".join(out)


def _nav_paths(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_paths(item) for item in nav)) if nav else set()
    if isinstance(nav, dict):
        return set().union(*(_nav_paths(value) for value in nav.values())) if nav else set()
    return set()


def on_config(config: Any) -> Any:
    from pathlib import Path

    guides_dir = Path(config["docs_dir"]) / "guides"
    named = _nav_paths(config["nav"])
    section = next((item["Guides"] for item in config["nav"] if isinstance(item, dict) and "Guides" in item), None)
    if section is None or not guides_dir.is_dir():
        return config
    for page in sorted(guides_dir.glob("*.md")):
        relative = f"guides/{page.name}"
        if relative not in named:
            title = next((line[2:].strip() for line in page.read_text(encoding="utf-8").splitlines()
                          if line.startswith("# ")), page.stem.replace("-", " ").capitalize())
            section.append({title: relative})
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if REST_MARK in markdown:
        markdown = markdown.replace(REST_MARK, rest_reference())
    return markdown
