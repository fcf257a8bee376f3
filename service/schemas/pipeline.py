"""Requests and responses of the pipeline endpoints: extract, verify, select, generate, turns."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.schemas.common import (
    MAX_MESSAGE_CHARS,
    MAX_MESSAGES,
    AttributeText,
    EvidenceOut,
    StrictModel,
    UserId,
    at_most_one_of,
    exactly_one_of,
    field_error,
    not_null,
)

MAX_INLINE_ATTRIBUTES = 200
MAX_VERIFY_ATTRIBUTES = 50
MAX_PROMPT_CHARS = 8_000


class ChatMessage(StrictModel):
    role: Literal["user", "assistant", "system"]
    content: str = Field(max_length=MAX_MESSAGE_CHARS)


Conversation = list[ChatMessage]


def _conversation_field(description: str) -> object:
    return Field(min_length=1, max_length=MAX_MESSAGES, description=description)


# --- extract -------------------------------------------------------------------------------


class ExtractRequest(StrictModel):
    # store: true needs a user_id.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"not": {"required": ["store"], "properties": {"store": {"const": True}}}},
                not_null("user_id"),
            ]
        }
    )

    conversation: Conversation = _conversation_field(  # type: ignore[assignment]
        "The messages to read; evidence indexes point into this list."
    )
    user_id: UserId | None = Field(
        default=None, description="Merge the supported facts into this user's attributes."
    )
    store: bool | None = Field(
        default=None,
        description="Write the supported facts (default: true when user_id is given). "
        "false gives verdicts only.",
    )
    extractor: Literal["learned", "rules", "llm"] | None = Field(
        default=None,
        description="learned: the extractor model on the user's clauses (CPU, the default "
        "without an LLM server); rules: no model; llm: the configured LLM. "
        "Default: TAILOR_EXTRACTOR.",
    )

    @model_validator(mode="after")
    def _store_needs_user(self) -> ExtractRequest:
        if self.store and self.user_id is None:
            raise field_error(self, "store", "store: true needs a user_id")
        return self


class CandidateOut(BaseModel):
    text: str
    category: str
    verdict: Literal["supported", "unsupported", "ungrounded"] = Field(
        description="supported: kept; unsupported: the verifier rejected it; ungrounded: its "
        "quote is not in the cited user message."
    )
    score: float | None = Field(description="Verifier score (null when never scored).")
    evidence: EvidenceOut
    action: Literal["added", "updated", "superseded", "rejected", "not_stored"] = Field(
        description="added: new attribute; updated: restates a stored one (its evidence grew); "
        "superseded: contradicts a stored one, which was retired; rejected: not supported; "
        "not_stored: supported, but store was false."
    )
    reason: str
    extractor: str
    attribute_id: str | None = None
    related_attribute_id: str | None = Field(
        default=None, description="The stored attribute it updated or superseded."
    )


class ExtractResponse(BaseModel):
    candidates: list[CandidateOut]
    stored: bool
    user_id: str | None


# --- verify --------------------------------------------------------------------------------


class VerifyRequest(StrictModel):
    conversation: Conversation = _conversation_field("The conversation.")  # type: ignore[assignment]
    attributes: list[AttributeText] = Field(min_length=1, max_length=MAX_VERIFY_ATTRIBUTES)


class VerdictOut(BaseModel):
    text: str
    verdict: Literal["supported", "unsupported"]
    score: float
    message_index: int | None = Field(description="The user message that supports it best.")


class VerifyResponse(BaseModel):
    results: list[VerdictOut]
    threshold: float


# --- select --------------------------------------------------------------------------------


class SelectRequest(StrictModel):
    """Give exactly one of `user_id` and `attributes`."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("user_id", "attributes"))

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    user_id: UserId | None = Field(default=None, description="Select from this user's attributes.")
    attributes: list[AttributeText] | None = Field(
        default=None, max_length=MAX_INLINE_ATTRIBUTES, description="Or from these."
    )

    @model_validator(mode="after")
    def _one_source(self) -> SelectRequest:
        if (self.user_id is None) == (self.attributes is None):
            raise field_error(self, "user_id", "give exactly one of user_id and attributes")
        return self


class ScoredAttribute(BaseModel):
    text: str
    id: str | None = Field(description="The stored attribute's id (null for inline ones).")
    score: float | None = Field(
        description="Relevance score; null when the embedding prefilter left it out."
    )
    similarity: float = Field(description="Cosine between prompt and attribute embeddings.")
    selected: bool


class SelectResponse(BaseModel):
    attributes: list[ScoredAttribute]
    threshold: float
    cap: int


# --- generate and turns ---------------------------------------------------------------------


class UsedAttribute(BaseModel):
    text: str
    id: str | None = None
    score: float | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


def _ends_with_user(model: BaseModel, messages: list[ChatMessage]) -> None:
    if messages and messages[-1].role != "user":
        raise field_error(
            model, "messages", "the last message must be the user's (the one to answer)"
        )


class GenerateRequest(StrictModel):
    """Give at most one of `user_id` and `attributes`; `include_generic` cannot be streamed."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                at_most_one_of("user_id", "attributes"),
                {
                    "not": {
                        "required": ["stream", "include_generic"],
                        "properties": {
                            "stream": {"const": True},
                            "include_generic": {"const": True},
                        },
                    }
                },
            ]
        }
    )

    messages: Conversation = _conversation_field("The chat so far; the last is the user's.")  # type: ignore[assignment]
    user_id: UserId | None = Field(
        default=None, description="Select from this user's stored attributes."
    )
    attributes: list[AttributeText] | None = Field(
        default=None,
        max_length=MAX_INLINE_ATTRIBUTES,
        description="Or use these attributes as given (no selection).",
    )
    include_generic: bool = Field(
        default=False, description="Also return the reply without attributes (A/B)."
    )
    stream: bool = Field(default=False, description="Answer with server-sent events.")
    max_tokens: int | None = Field(default=None, ge=1, le=4096)
    temperature: float | None = Field(default=None, ge=0, le=2)

    @model_validator(mode="after")
    def _check(self) -> GenerateRequest:
        _ends_with_user(self, self.messages)
        if self.user_id is not None and self.attributes is not None:
            raise field_error(self, "attributes", "give at most one of user_id and attributes")
        if self.stream and self.include_generic:
            raise field_error(
                self, "include_generic", "include_generic cannot be streamed; ask without stream"
            )
        return self


class GenerateResponse(BaseModel):
    reply: str
    attributes_used: list[UsedAttribute]
    generic_reply: str | None = None
    model: str
    usage: Usage


class TurnRequest(StrictModel):
    user_id: UserId
    messages: Conversation = _conversation_field(  # type: ignore[assignment]
        "The chat so far; the last message is the user's new turn."
    )
    extract: bool = Field(
        default=True, description="Queue extraction of the user's facts from these messages."
    )
    stream: bool = Field(
        default=False,
        description="Answer with server-sent events; the job is queued only once the reply "
        "is complete.",
    )
    max_tokens: int | None = Field(default=None, ge=1, le=4096)
    temperature: float | None = Field(default=None, ge=0, le=2)

    @model_validator(mode="after")
    def _check(self) -> TurnRequest:
        _ends_with_user(self, self.messages)
        return self


class TurnResponse(BaseModel):
    reply: str
    attributes_used: list[UsedAttribute]
    job_id: str | None = Field(description="The queued extraction job (GET /v1/jobs/{id}).")
    model: str
    usage: Usage
