"""Write tailor_client/models.py from the service's openapi.yaml.

    python clients/python/generate_models.py            # rewrite models.py
    python clients/python/generate_models.py --check    # exit 1 when models.py is stale

One pydantic model per schema under components/schemas (a multipart upload body excepted):
the same name, the same fields, the same required fields, the types the schema gives. Request
models forbid unknown fields (as the service does), response models ignore them so that a
newer service does not break an older client. Constraints (lengths, patterns, "exactly one
of") are left to the service, which answers 422 naming the field. Needs PyYAML (not a
dependency of the client itself); tests/clients/test_client_schema_drift.py runs it."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SPEC = HERE.parents[1] / "openapi.yaml"
TARGET = HERE / "tailor_client" / "models.py"

# Schemas that are no JSON document: the multipart body of POST /v1/eval/uploads (the client
# sends the file itself).
SKIPPED = frozenset({"Body_upload_v1_eval_uploads_post"})

HEADER = '''"""Pydantic models of the Tailor API's request and response bodies.

Generated from openapi.yaml by clients/python/generate_models.py; do not edit by hand (a test
fails when this file and openapi.yaml disagree)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
'''


def load_schemas(spec_path: Path = SPEC) -> dict[str, dict[str, Any]]:
    """components/schemas of the spec, the skipped ones left out."""
    spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    schemas: dict[str, dict[str, Any]] = spec["components"]["schemas"]
    return {name: s for name, s in schemas.items() if name not in SKIPPED}


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def refs(schema: Any) -> set[str]:
    """Every schema name ``schema`` refers to, at any depth."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                found.add(ref_name(value))
            else:
                found |= refs(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= refs(item)
    return found


def py_type(schema: dict[str, Any]) -> str:
    """The Python annotation for a property's schema."""
    if "$ref" in schema:
        return ref_name(schema["$ref"])
    if "anyOf" in schema:
        options = [py_type(s) for s in schema["anyOf"]]
        unique = list(dict.fromkeys(options))
        if "None" in unique:  # None last, as usual
            unique = [o for o in unique if o != "None"] + ["None"]
        return " | ".join(unique)
    if "enum" in schema:
        return "Literal[" + ", ".join(_literal(v) for v in schema["enum"]) + "]"
    kind = schema.get("type")
    if kind == "null":
        return "None"
    if kind == "string":
        return "datetime" if schema.get("format") == "date-time" else "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "array":
        return f"list[{py_type(schema.get('items', {}))}]"
    if kind == "object":
        extra = schema.get("additionalProperties", True)
        value = py_type(extra) if isinstance(extra, dict) and extra else "Any"
        return f"dict[str, {value}]"
    return "Any"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return "None"
    value = schema["default"]
    if isinstance(value, str):
        return _literal(value)
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    raise ValueError(f"unsupported default {value!r}")


def is_request(schema: dict[str, Any]) -> bool:
    """Request bodies are the schemas that forbid unknown fields (the service's StrictModel)."""
    return schema.get("additionalProperties") is False


def order(schemas: dict[str, dict[str, Any]]) -> list[str]:
    """Names with every referenced schema before the one that uses it, else alphabetical."""
    done: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in schemas:
            return
        seen.add(name)
        for dep in sorted(refs(schemas[name])):
            visit(dep)
        done.append(name)

    for name in sorted(schemas):
        visit(name)
    return done


def render_model(name: str, schema: dict[str, Any]) -> str:
    lines = [f"class {name}(BaseModel):"]
    description = schema.get("description")
    if description:
        doc = " ".join(str(description).split())
        wrapped = textwrap.wrap(doc, width=90)
        if len(wrapped) == 1 and len(wrapped[0]) <= 88:
            lines.append(f'    """{wrapped[0]}"""')
        else:
            lines.append(f'    """{wrapped[0]}')
            lines += [f"    {line}" for line in wrapped[1:]]
            lines.append('    """')
        lines.append("")
    if is_request(schema):
        lines.append('    model_config = ConfigDict(extra="forbid")')
        lines.append("")
    required = set(schema.get("required", ()))
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    if not properties:
        lines.append("    pass")
    for field, prop in properties.items():
        annotation = py_type(prop)
        if field in required:
            lines.append(f"    {field}: {annotation}")
            continue
        default = _default(prop)
        if default == "None" and "None" not in annotation.split(" | "):
            annotation += " | None"
        lines.append(f"    {field}: {annotation} = {default}")
    return "\n".join(lines)


def render(spec_path: Path = SPEC) -> str:
    schemas = load_schemas(spec_path)
    names = order(schemas)
    body = "\n\n\n".join(render_model(name, schemas[name]) for name in names)
    exported = "\n".join(f'    "{name}",' for name in sorted(names))
    return f"{HEADER}\n__all__ = [\n{exported}\n]\n\n\n{body}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--out", type=Path, default=TARGET)
    parser.add_argument("--check", action="store_true", help="fail when --out is stale")
    args = parser.parse_args(argv)
    text = render(args.spec)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
