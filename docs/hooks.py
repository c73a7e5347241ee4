"""MkDocs hooks: the references that are generated from the code at build time.

- ``<!-- hotspan:cli-reference -->``: every command's ``--help``, from the argparse parsers
  the ``hotspan`` command itself builds;
- ``<!-- hotspan:rest-reference -->``: every route of ``hotspan serve``, from the OpenAPI
  document its FastAPI application publishes at ``/openapi.json``.

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


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if REST_MARK in markdown:
        markdown = markdown.replace(REST_MARK, rest_reference())
    return markdown
