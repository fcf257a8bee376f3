"""The Python client (clients/python) against openapi.yaml: each fails when the contract changes
and the client does not follow.

- the models are what clients/python/generate_models.py makes of openapi.yaml today;
- each model has its schema's fields, the same ones required;
- the client's operation table holds exactly the /v1 operations of openapi.yaml, and both
  clients build a request for each;
- each operation's method takes a parameter for each of its path and query parameters, each
  property of its JSON body, and (POST) an ``idempotency_key``."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tailor_client
import yaml
from pydantic import BaseModel
from tailor_client import _calls, models
from tailor_client._async import AsyncTailorClient
from tailor_client._operations import OPERATIONS
from tailor_client._sync import TailorClient

ROOT = Path(__file__).resolve().parents[2]
SPEC = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
SCHEMAS: dict[str, dict[str, Any]] = SPEC["components"]["schemas"]
CLIENT = ROOT / "clients" / "python"
METHODS = ("get", "put", "post", "patch", "delete")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_models", CLIENT / "generate_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("generate_models", module)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def v1_operations() -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in SPEC["paths"].items()
        if path.startswith("/v1/")
        for method in item
        if method in METHODS
    }


def test_models_are_generated_from_the_current_openapi_yaml() -> None:
    current = (CLIENT / "tailor_client" / "models.py").read_text(encoding="utf-8")
    assert current == GENERATOR.render(ROOT / "openapi.yaml"), (
        "clients/python/tailor_client/models.py is stale: run "
        "`.venv/bin/python clients/python/generate_models.py`"
    )


@pytest.mark.parametrize("name", sorted(set(SCHEMAS) - GENERATOR.SKIPPED))
def test_each_model_has_its_schemas_fields(name: str) -> None:
    schema = SCHEMAS[name]
    model = getattr(models, name, None)
    assert isinstance(model, type) and issubclass(model, BaseModel), f"no model {name}"
    fields = model.model_fields
    assert list(fields) == list(schema.get("properties", {})), name
    required = {f for f, info in fields.items() if info.is_required()}
    assert required == set(schema.get("required", ())), name
    forbids = model.model_config.get("extra") == "forbid"
    assert forbids == (schema.get("additionalProperties") is False), name


def test_no_model_without_a_schema() -> None:
    exported = {
        n for n, v in vars(models).items() if isinstance(v, type) and issubclass(v, BaseModel)
    }
    assert exported - {"BaseModel"} == set(SCHEMAS) - GENERATOR.SKIPPED


def test_the_operation_table_is_openapi_yamls_v1_operations() -> None:
    table = set(OPERATIONS.values())
    assert len(table) == len(OPERATIONS)
    missing = v1_operations() - table
    assert not missing, f"operations the client does not cover: {sorted(missing)}"
    extra = table - v1_operations()
    assert not extra, f"operations the client calls that openapi.yaml lacks: {sorted(extra)}"


def test_every_operation_has_a_request_built_for_it() -> None:
    source = inspect.getsource(_calls)
    for name in OPERATIONS:
        assert re.search(rf'"{re.escape(name)}"', source), f"no call of {name} in _calls"


# The method of each operation in each client: (sync, async).
def _method(cls: type, path: str) -> Callable[..., Any]:
    target: Any = cls
    for part in path.split("."):
        target = getattr(target, part)
    return target  # type: ignore[no-any-return]


RESOURCES = {
    "attributes": (tailor_client.Attributes, tailor_client.AsyncAttributes),
    "users": (tailor_client.Users, tailor_client.AsyncUsers),
    "jobs": (tailor_client.Jobs, tailor_client.AsyncJobs),
    "eval": (tailor_client.Eval, tailor_client.AsyncEval),
}
# Operation name -> the method name, where the two differ (list operations page).
METHOD_NAMES = {
    "attributes.list": "attributes.list_page",
    "jobs.list": "jobs.list_page",
    "eval.list": "eval.list_page",
}


def methods_of(operation: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    name = METHOD_NAMES.get(operation, operation)
    if "." not in name:
        return getattr(TailorClient, name), getattr(AsyncTailorClient, name)
    resource, method = name.split(".", 1)
    sync_cls, async_cls = RESOURCES[resource]
    return getattr(sync_cls, method), getattr(async_cls, method)


def _body_properties(operation: dict[str, Any]) -> set[str]:
    content = operation.get("requestBody", {}).get("content", {})
    names: set[str] = set()
    for media in content.values():
        ref = media.get("schema", {}).get("$ref")
        if ref:
            names |= set(SCHEMAS[ref.rsplit("/", 1)[-1]].get("properties", {}))
    return names


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_each_method_takes_its_operations_parameters(operation: str) -> None:
    method, path = OPERATIONS[operation]
    spec = SPEC["paths"].get(path, {}).get(method.lower())
    if spec is None:
        pytest.fail(f"{method} {path} is not in openapi.yaml")
    wanted = {
        p["name"] for p in spec.get("parameters", ()) if p["in"] in ("path", "query")
    } | _body_properties(spec)
    if method == "POST":
        wanted.add("idempotency_key")
    for fn in methods_of(operation):
        params = set(inspect.signature(fn).parameters)
        missing = wanted - params
        assert not missing, f"{fn.__qualname__} lacks {sorted(missing)} ({method} {path})"
        assert inspect.iscoroutinefunction(fn) == fn.__qualname__.startswith("Async")
