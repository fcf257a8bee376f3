"""The rules every request body is held to, and the OpenAPI document saying the same thing."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from service.app import create_app
from service.config import Settings
from service.schemas.attributes import (
    AttributeBatchCreate,
    AttributeCreate,
    AttributePatch,
)
from service.schemas.common import STORABLE_TEXT_PATTERN, StrictModel
from service.schemas.eval import EvalRequest
from service.schemas.pipeline import (
    ExtractRequest,
    GenerateRequest,
    SelectRequest,
    TurnRequest,
    VerifyRequest,
)

CHAT = [
    {"role": "assistant", "content": "Hello there."},
    {"role": "user", "content": "I keep bees."},
]

# A valid body of every request model, with every string field given.
EXAMPLES: dict[type[BaseModel], dict[str, Any]] = {
    AttributeCreate: {
        "text": "The user keeps bees.",
        "category": "hobby",
        "evidence": [{"message_index": 1, "quote": "I keep bees."}],
    },
    AttributePatch: {"text": "The user keeps bees.", "category": "hobby", "status": "active"},
    AttributeBatchCreate: {
        "items": [
            {
                "text": "The user keeps bees.",
                "category": "hobby",
                "evidence": [{"message_index": 1, "quote": "I keep bees."}],
            }
        ]
    },
    ExtractRequest: {"conversation": CHAT, "user_id": "u1", "store": True, "extractor": "rules"},
    VerifyRequest: {"conversation": CHAT, "attributes": ["The user keeps bees."]},
    SelectRequest: {"prompt": "Plan my weekend.", "attributes": ["The user keeps bees."]},
    GenerateRequest: {"messages": CHAT[1:], "attributes": ["The user keeps bees."]},
    TurnRequest: {"user_id": "u1", "messages": CHAT[1:]},
    EvalRequest: {"dataset": "tiny", "judge": "random", "splits": ["general"], "tiers": ["easy"]},
}


def _strings(value: Any, loc: tuple[int | str, ...] = ()) -> Iterator[tuple[int | str, ...]]:
    if isinstance(value, str):
        yield loc
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*loc, index))


def _with(body: dict[str, Any], loc: tuple[int | str, ...], text: str) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    target: Any = changed
    for part in loc[:-1]:
        target = target[part]
    target[loc[-1]] = target[loc[-1]][:1] + text + target[loc[-1]][1:]
    return changed


def _errors(model: type[BaseModel], body: Any) -> list[tuple[tuple[int | str, ...], str]]:
    try:
        model.model_validate(body)
    except ValidationError as exc:
        return [(tuple(e["loc"]), e["type"]) for e in exc.errors()]
    return []


def test_every_request_model_has_an_example() -> None:
    def subclasses(cls: type) -> set[type]:
        return {sub for direct in cls.__subclasses__() for sub in {direct} | subclasses(direct)}

    # Nested parts (a message, a piece of evidence) are checked through their parents.
    nested = {"ChatMessage", "EvidenceSchema", "AttributeBatchItem"}
    models = {cls for cls in subclasses(StrictModel) if cls.__name__ not in nested}
    assert models == set(EXAMPLES)
    for model, body in EXAMPLES.items():
        assert _errors(model, body) == [], model


@pytest.mark.parametrize("bad", ["\x00", "\ud800", "\udfff"])
@pytest.mark.parametrize("model", list(EXAMPLES), ids=lambda m: m.__name__)
def test_no_string_field_may_hold_an_unstorable_character(model: type[BaseModel], bad: str) -> None:
    body = EXAMPLES[model]
    locations = list(_strings(body))
    assert locations
    for loc in locations:
        assert _errors(model, _with(body, loc, bad)) == [(loc, "string_unstorable")], loc


def test_every_unstorable_string_is_named() -> None:
    body = {"conversation": [{"role": "user", "content": "a\x00"}] * 3, "user_id": "u\x00"}
    assert _errors(ExtractRequest, body) == [
        (("conversation", 0, "content"), "string_unstorable"),
        (("conversation", 1, "content"), "string_unstorable"),
        (("conversation", 2, "content"), "string_unstorable"),
        (("user_id",), "string_unstorable"),
    ]


@pytest.mark.parametrize("value", [0, 1, "true", "false", "yes", None])
@pytest.mark.parametrize(
    ("model", "field"),
    [
        (ExtractRequest, "store"),
        (GenerateRequest, "stream"),
        (GenerateRequest, "include_generic"),
        (TurnRequest, "extract"),
    ],
)
def test_booleans_are_strict(model: type[BaseModel], field: str, value: object) -> None:
    body = EXAMPLES[model] | {field: value}
    if value is None and model is ExtractRequest:
        assert _errors(model, body) == []  # store is nullable: null means the default
        return
    assert _errors(model, body) == [((field,), "bool_type")]


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data_dir: Path = tmp_path_factory.mktemp("openapi")
    return create_app(Settings(data_dir=data_dir)).openapi()


def _request_schemas(openapi: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = {}
    for path in openapi["paths"].values():
        for operation in path.values():
            content = operation.get("requestBody", {}).get("content", {})
            ref = content.get("application/json", {}).get("schema", {}).get("$ref")
            if ref:
                names[ref.rsplit("/", 1)[-1]] = ref
    return {name: openapi["components"]["schemas"][name] for name in names}


def _string_schemas(schema: Any, components: dict[str, Any], seen: set[str]) -> Iterator[Any]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if ref is not None:
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                yield from _string_schemas(components[name], components, seen)
            return
        if schema.get("type") == "string":
            yield schema
        for key in ("properties",):
            for item in schema.get(key, {}).values():
                yield from _string_schemas(item, components, seen)
        for key in ("anyOf", "oneOf", "allOf"):
            for item in schema.get(key, []):
                yield from _string_schemas(item, components, seen)
        yield from _string_schemas(schema.get("items"), components, seen)


def test_the_openapi_document_says_no_string_may_hold_nul(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    schemas = _request_schemas(openapi)
    assert {m.__name__ for m in EXAMPLES} <= set(schemas)
    for name, schema in schemas.items():
        for string in _string_schemas(schema, components, set()):
            if "enum" in string:
                continue
            pattern = string.get("pattern")
            assert pattern is not None, (name, string)
            assert pattern == STORABLE_TEXT_PATTERN or pattern.startswith("^["), (name, pattern)
            assert re.search(pattern, "a\x00") is None and re.search(pattern, "\x00") is None


def test_the_idempotency_key_is_documented_as_visible_ascii(openapi: dict[str, Any]) -> None:
    operation = openapi["paths"]["/v1/users/{user_id}/attributes"]["post"]
    (header,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    pattern = header["schema"]["anyOf"][0]["pattern"]
    assert pattern == r"^[\x21-\x7e]{1,255}$"
    assert re.fullmatch(pattern, "k-1.A_b~")
    assert not any(re.fullmatch(pattern, key) for key in ("", "a b", "é", "x" * 256, "a\x00"))


# Cross-field rules: what the validators refuse, the schema refuses too, and nothing else.
CROSS_FIELD_CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (SelectRequest, {"prompt": "p", "user_id": "u"}),
    (SelectRequest, {"prompt": "p", "attributes": []}),
    (SelectRequest, {"prompt": "p", "user_id": "u", "attributes": None}),
    (SelectRequest, {"prompt": "p", "user_id": None, "attributes": ["a"]}),
    (SelectRequest, {"prompt": "p", "user_id": "u", "attributes": ["a"]}),
    (SelectRequest, {"prompt": "p"}),
    (SelectRequest, {"prompt": "p", "user_id": None, "attributes": None}),
    (EvalRequest, {"dataset": "d"}),
    (EvalRequest, {"upload_id": "a" * 32}),
    (EvalRequest, {"dataset": "d", "upload_id": None}),
    (EvalRequest, {"dataset": "d", "upload_id": "a" * 32}),
    (EvalRequest, {}),
    (GenerateRequest, {"messages": CHAT[1:]}),
    (GenerateRequest, {"messages": CHAT[1:], "user_id": "u"}),
    (GenerateRequest, {"messages": CHAT[1:], "user_id": "u", "attributes": None}),
    (GenerateRequest, {"messages": CHAT[1:], "user_id": "u", "attributes": ["a"]}),
    (GenerateRequest, {"messages": CHAT[1:], "stream": True, "include_generic": False}),
    (GenerateRequest, {"messages": CHAT[1:], "stream": True, "include_generic": True}),
    (ExtractRequest, {"conversation": CHAT}),
    (ExtractRequest, {"conversation": CHAT, "store": False}),
    (ExtractRequest, {"conversation": CHAT, "store": True, "user_id": "u"}),
    (ExtractRequest, {"conversation": CHAT, "store": True}),
    (ExtractRequest, {"conversation": CHAT, "store": True, "user_id": None}),
    (AttributePatch, {"category": None}),
    (AttributePatch, {"text": "t"}),
    (AttributePatch, {}),
    (AttributePatch, {"text": None}),
    (AttributePatch, {"status": None}),
]


@pytest.mark.parametrize(
    ("model", "body"), CROSS_FIELD_CASES, ids=lambda v: getattr(v, "__name__", None)
)
def test_the_schema_states_the_cross_field_rules(
    openapi: dict[str, Any], model: type[BaseModel], body: dict[str, Any]
) -> None:
    components = openapi["components"]["schemas"]
    document = components[model.__name__] | {"components": {"schemas": components}}
    schema_accepts = jsonschema.Draft202012Validator(document).is_valid(body)
    assert schema_accepts == (_errors(model, body) == []), _errors(model, body)
