"""Pydantic models of the Tailor API's request and response bodies.

Generated from openapi.yaml by clients/python/generate_models.py; do not edit by hand (a test
fails when this file and openapi.yaml disagree)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "AttributeBatchCreate",
    "AttributeBatchItem",
    "AttributeBatchOut",
    "AttributeBatchResult",
    "AttributeCreate",
    "AttributeList",
    "AttributeOut",
    "AttributePatch",
    "AuditEntryOut",
    "AuditList",
    "BatchItemProblem",
    "CandidateOut",
    "ChatMessage",
    "ErasureCounts",
    "ErasureOut",
    "EvalAccepted",
    "EvalRequest",
    "EvalRunList",
    "EvalRunOut",
    "EvidenceOut",
    "EvidenceSchema",
    "ExtractRequest",
    "ExtractResponse",
    "FieldError",
    "GenerateRequest",
    "GenerateResponse",
    "JobList",
    "JobOut",
    "JobStatusOut",
    "Problem",
    "ScoredAttribute",
    "SelectRequest",
    "SelectResponse",
    "TurnRequest",
    "TurnResponse",
    "UploadOut",
    "Usage",
    "UsedAttribute",
    "UserExport",
    "VerdictOut",
    "VerifyRequest",
    "VerifyResponse",
]


class EvidenceSchema(BaseModel):
    """Evidence in a request."""

    model_config = ConfigDict(extra="forbid")

    message_index: int
    quote: str


class AttributeBatchItem(BaseModel):
    """One item of a batch: the fields and rules of a single create."""

    model_config = ConfigDict(extra="forbid")

    text: str
    category: str | None = None
    evidence: list[EvidenceSchema] | None = None


class AttributeBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[AttributeBatchItem]


class EvidenceOut(BaseModel):
    """Evidence in a response: read from stored rows or pipeline results as they are."""

    message_index: int
    quote: str


class AttributeOut(BaseModel):
    id: str
    user_id: str
    text: str
    category: str | None
    status: Literal["active", "superseded", "deleted"]
    verdict: str | None
    verifier_score: float | None
    source: str
    superseded_by: str | None
    evidence: list[EvidenceOut]
    created_at: datetime
    updated_at: datetime


class BatchItemProblem(BaseModel):
    """Why one item of a batch was not written (RFC 9457 members, for that item only)."""

    type: str
    title: str
    detail: str
    field: str


class AttributeBatchResult(BaseModel):
    index: int
    outcome: Literal["created", "merged", "rejected"]
    attribute: AttributeOut | None = None
    similarity: float | None = None
    problem: BatchItemProblem | None = None


class AttributeBatchOut(BaseModel):
    user_id: str
    results: list[AttributeBatchResult]
    created: int
    merged: int
    rejected: int


class AttributeCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str
    category: str | None = None
    evidence: list[EvidenceSchema] | None = None


class AttributeList(BaseModel):
    items: list[AttributeOut]
    next_cursor: str | None


class AttributePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    category: str | None = None
    status: Literal["active", "superseded", "deleted"] | None = None


class AuditEntryOut(BaseModel):
    id: int
    attribute_id: str
    action: str
    actor: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    created_at: datetime


class AuditList(BaseModel):
    items: list[AuditEntryOut]


class CandidateOut(BaseModel):
    text: str
    category: str
    verdict: Literal["supported", "unsupported", "ungrounded"]
    score: float | None
    evidence: EvidenceOut
    action: Literal["added", "updated", "superseded", "rejected", "not_stored"]
    reason: str
    extractor: str
    attribute_id: str | None = None
    related_attribute_id: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system"]
    content: str


class ErasureCounts(BaseModel):
    users: int
    attributes: int
    evidence: int
    audit_entries: int
    jobs: int
    idempotency_keys: int


class ErasureOut(BaseModel):
    user_id: str
    deleted: ErasureCounts


class EvalAccepted(BaseModel):
    run_id: str
    status: Literal["queued", "running", "succeeded", "failed"]


class EvalRequest(BaseModel):
    """Give exactly one of `dataset` and `upload_id`."""

    model_config = ConfigDict(extra="forbid")

    dataset: str | None = None
    upload_id: str | None = None
    judge: Literal["reward", "llm", "embedding", "random"] = "reward"
    splits: list[Literal["general", "specific"]] | None = None
    tiers: list[Literal["easy", "medium", "hard"]] | None = None
    limit: int | None = None
    seed: int = 0


class EvalRunOut(BaseModel):
    run_id: str
    status: Literal["queued", "running", "succeeded", "failed"]
    params: dict[str, Any]
    progress: dict[str, Any] | None
    results: dict[str, Any] | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class EvalRunList(BaseModel):
    items: list[EvalRunOut]
    next_cursor: str | None


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation: list[ChatMessage]
    user_id: str | None = None
    store: bool | None = None
    extractor: Literal["learned", "rules", "llm"] | None = None


class ExtractResponse(BaseModel):
    candidates: list[CandidateOut]
    stored: bool
    user_id: str | None


class FieldError(BaseModel):
    field: str
    message: str
    type: str


class GenerateRequest(BaseModel):
    """Give at most one of `user_id` and `attributes`; `include_generic` cannot be streamed."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage]
    user_id: str | None = None
    attributes: list[str] | None = None
    include_generic: bool = False
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


class UsedAttribute(BaseModel):
    text: str
    id: str | None = None
    score: float | None = None


class GenerateResponse(BaseModel):
    reply: str
    attributes_used: list[UsedAttribute]
    generic_reply: str | None = None
    model: str
    usage: Usage


class JobStatusOut(BaseModel):
    id: str
    kind: str
    status: Literal["queued", "running", "succeeded", "failed"]
    attempts: int
    max_attempts: int
    error: str | None
    result: dict[str, Any] | None
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    run_after: datetime


class JobList(BaseModel):
    items: list[JobStatusOut]
    next_cursor: str | None


class JobOut(BaseModel):
    id: str
    kind: str
    status: str
    attempts: int
    payload: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    updated_at: datetime


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] | None = None


class ScoredAttribute(BaseModel):
    text: str
    id: str | None
    score: float | None
    similarity: float
    selected: bool


class SelectRequest(BaseModel):
    """Give exactly one of `user_id` and `attributes`."""

    model_config = ConfigDict(extra="forbid")

    prompt: str
    user_id: str | None = None
    attributes: list[str] | None = None


class SelectResponse(BaseModel):
    attributes: list[ScoredAttribute]
    threshold: float
    cap: int


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str
    messages: list[ChatMessage]
    extract: bool = True
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None


class TurnResponse(BaseModel):
    reply: str
    attributes_used: list[UsedAttribute]
    job_id: str | None
    model: str
    usage: Usage


class UploadOut(BaseModel):
    upload_id: str
    files: list[str]


class UserExport(BaseModel):
    user_id: str
    created_at: datetime
    exported_at: datetime
    attributes: list[AttributeOut]
    audit: list[AuditEntryOut]
    jobs: list[JobOut]


class VerdictOut(BaseModel):
    text: str
    verdict: Literal["supported", "unsupported"]
    score: float
    message_index: int | None


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation: list[ChatMessage]
    attributes: list[str]


class VerifyResponse(BaseModel):
    results: list[VerdictOut]
    threshold: float
