"""Shared types and the size limits that every request is held to."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

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


class StrictModel(BaseModel):
    """Requests reject unknown fields, so a typo is an error rather than silently ignored."""

    model_config = ConfigDict(extra="forbid")


class EvidenceSchema(StrictModel):
    message_index: int = Field(ge=0, lt=MAX_MESSAGES, description="Index into the conversation.")
    quote: str = Field(min_length=1, max_length=MAX_QUOTE_CHARS, description="Verbatim quote.")


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
