"""Shared types and the size limits that every request is held to."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

MAX_ATTRIBUTE_CHARS = 500
MAX_CATEGORY_CHARS = 64
MAX_QUOTE_CHARS = 2_000
MAX_EVIDENCE = 20
MAX_MESSAGE_CHARS = 8_000
MAX_MESSAGES = 200
USER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$"
ID_PATTERN = r"^[0-9a-f]{32}$"

UserId = Annotated[str, StringConstraints(pattern=USER_ID_PATTERN)]
AttributeText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ATTRIBUTE_CHARS)
]
Category = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=MAX_CATEGORY_CHARS, pattern=r"^[a-z0-9_]+$"
    ),
]


# Characters no request string may hold, whatever the database: PostgreSQL text cannot store
# NUL (U+0000), and a lone surrogate (U+D800-U+DFFF, which a JSON "\ud800" escape or a
# surrogate-encoded body can carry) cannot be written as UTF-8 by any database driver nor read
# by a tokenizer. SQLite would have stored the first, so without this one rule the two backends
# would answer the same request differently (201 and 500).
UNSTORABLE_CHARACTERS = re.compile(r"[\x00\ud800-\udfff]")
# What the OpenAPI document says about every free-text request string (JSON Schema cannot
# speak of lone surrogates: a JSON text holding one is not valid Unicode to begin with).
STORABLE_TEXT_PATTERN = r"^[^\x00]*$"
UNSTORABLE_MESSAGE = "must not contain NUL (\\u0000) or unpaired surrogate characters"


def _from_json(value: Any, loc: tuple[int | str, ...], errors: list[InitErrorDetails]) -> Any:
    """A JSON value as strict validation should see it: an integral number is an integer
    whatever its spelling (5.0 is the integer 5, as JSON Schema has it), and every string
    holding an unstorable character adds an error at its location."""
    if isinstance(value, str):
        if UNSTORABLE_CHARACTERS.search(value):
            error = PydanticCustomError("string_unstorable", UNSTORABLE_MESSAGE)
            errors.append(InitErrorDetails(type=error, loc=loc, input=value))
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _from_json(item, (*loc, key), errors) for key, item in value.items()}
    if isinstance(value, list):
        return [_from_json(item, (*loc, index), errors) for index, item in enumerate(value)]
    return value


def _document_storable(schema: object) -> None:
    """Give every free-text string in a model's own JSON schema (not those behind a $ref: each
    model documents its own) the storable-text pattern. Strings with a pattern of their own
    (ids, slugs: ASCII classes, which hold no NUL) and enums keep theirs."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return
    if (
        schema.get("type") == "string"
        and not {"pattern", "enum", "const", "format"} & schema.keys()
    ):
        schema["pattern"] = STORABLE_TEXT_PATTERN
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for branch in schema.get(key, []):
            _document_storable(branch)
    for key in ("items", "additionalProperties"):
        _document_storable(schema.get(key))
    for prop in schema.get("properties", {}).values():
        _document_storable(prop)


class StrictModel(BaseModel):
    """The base of every request body.

    - Unknown fields are rejected, so a typo is an error rather than silently ignored.
    - Nothing is coerced (strict mode): `"store": 0`, `"store": "true"` and `"limit": "5"` are
      422s naming the field, as the OpenAPI types promise, not booleans and numbers; only an
      integral number is an integer however it is written (`5.0`), as in JSON Schema. NaN and
      infinities (which Python's JSON parser accepts) are refused.
    - No string anywhere in the body (nested models and lists included) may hold a character
      that a database cannot store (UNSTORABLE_CHARACTERS): the same 422, naming each such
      field, on SQLite and PostgreSQL alike.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _json_rules(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # not a JSON object: the ordinary type error follows
        errors: list[InitErrorDetails] = []
        data = _from_json(data, (), errors)
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(core_schema)
        _document_storable(handler.resolve_ref_schema(json_schema))
        return json_schema


def not_null(name: str) -> dict[str, Any]:
    """JSON Schema: ``name`` is given and is not null (for the cross-field rules that the
    model validators enforce, so that the OpenAPI document states them too)."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def exactly_one_of(a: str, b: str) -> dict[str, Any]:
    """JSON Schema: exactly one of ``a`` and ``b`` is given and not null."""
    return {"oneOf": [not_null(a), not_null(b)]}


def at_most_one_of(a: str, b: str) -> dict[str, Any]:
    """JSON Schema: not both of ``a`` and ``b`` given and not null."""
    return {"not": {"allOf": [not_null(a), not_null(b)]}}


class EvidenceSchema(StrictModel):
    """Evidence in a request."""

    message_index: int = Field(ge=0, lt=MAX_MESSAGES, description="Index into the conversation.")
    quote: str = Field(min_length=1, max_length=MAX_QUOTE_CHARS, description="Verbatim quote.")


class EvidenceOut(BaseModel):
    """Evidence in a response: read from stored rows or pipeline results as they are."""

    model_config = ConfigDict(from_attributes=True)

    message_index: int = Field(description="Index into the conversation.")
    quote: str = Field(description="Verbatim quote.")


class FieldError(BaseModel):
    field: str = Field(description="Where the problem is, e.g. `body.text` or `query.limit`.")
    message: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] | None = None


def field_error(model: BaseModel, field: str, message: str) -> ValidationError:
    """A cross-field check's failure located at ``field`` (so the problem document names
    ``body.<field>``, not just ``body``); raise it from a model validator."""
    return ValidationError.from_exception_data(
        type(model).__name__,
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", message),
                loc=(field,),
                input=getattr(model, field, None),
            )
        ],
    )
