"""The request of every operation, shared by `TailorClient` and `AsyncTailorClient`: each
function returns the `Call` its method sends."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import httpx

from tailor_client._core import (
    NOT_GIVEN,
    Call,
    _NotGiven,
    body,
    call,
    content,
    keep,
    model,
    no_content,
    text,
    upload_name,
)
from tailor_client.models import (
    AttributeBatchOut,
    AttributeCreate,
    AttributeList,
    AttributeOut,
    AuditList,
    ChatMessage,
    ErasureOut,
    EvalAccepted,
    EvalRunList,
    EvalRunOut,
    EvidenceSchema,
    ExtractResponse,
    GenerateResponse,
    JobList,
    JobStatusOut,
    SelectResponse,
    TurnResponse,
    UploadOut,
    UserExport,
    VerifyResponse,
)

Message = ChatMessage | Mapping[str, str]
"""A chat message: a `ChatMessage` or a mapping ``{"role", "content"}``."""
Evidence = EvidenceSchema | Mapping[str, Any]
"""Evidence for an attribute: an `EvidenceSchema` or ``{"message_index", "quote"}``."""
NewAttribute = AttributeCreate | Mapping[str, Any]
"""One item of a batch: an `AttributeCreate` or ``{"text", "category"?, "evidence"?}``."""
AttributeStatus = Literal["active", "superseded", "deleted"]
ListStatus = Literal["active", "superseded", "deleted", "any"]
Judge = Literal["reward", "llm", "embedding", "random"]
Extractor = Literal["learned", "rules", "llm"]
RunStatus = Literal["queued", "running", "succeeded", "failed"]
FileInput = str | os.PathLike[str] | bytes | IO[bytes]

TERMINAL_JOB = frozenset({"succeeded", "failed"})
TERMINAL_RUN = frozenset({"succeeded", "failed"})


def _messages(messages: Sequence[Message]) -> list[Any]:
    return list(messages)


# --- attributes ---------------------------------------------------------------------------


def attributes_page(
    user_id: str, *, status: ListStatus | None, limit: int | None, cursor: str | None
) -> Call[AttributeList]:
    return call(
        "attributes.list",
        model(AttributeList),
        path_params={"user_id": user_id},
        params={"status": status, "limit": limit, "cursor": cursor},
    )


def attribute_create(
    user_id: str,
    *,
    text: str,
    category: str | None,
    evidence: Sequence[Evidence] | None,
    idempotency_key: str | None,
) -> Call[AttributeOut]:
    return call(
        "attributes.create",
        model(AttributeOut),
        path_params={"user_id": user_id},
        json=body(text=text, category=category, evidence=evidence),
        idempotency_key=idempotency_key,
    )


def attribute_create_batch(
    user_id: str, items: Sequence[NewAttribute], *, idempotency_key: str | None
) -> Call[AttributeBatchOut]:
    return call(
        "attributes.create_batch",
        model(AttributeBatchOut),
        path_params={"user_id": user_id},
        json=body(items=list(items)),
        idempotency_key=idempotency_key,
    )


def attribute_get(user_id: str, attribute_id: str) -> Call[AttributeOut]:
    return call(
        "attributes.get",
        model(AttributeOut),
        path_params={"user_id": user_id, "attribute_id": attribute_id},
    )


def attribute_update(
    user_id: str,
    attribute_id: str,
    *,
    text: str | _NotGiven,
    category: str | _NotGiven | None,
    status: AttributeStatus | _NotGiven,
) -> Call[AttributeOut]:
    patch: dict[str, Any] = body(text=text, status=status)
    if category is not NOT_GIVEN:
        patch["category"] = category  # None clears it
    return call(
        "attributes.update",
        model(AttributeOut),
        path_params={"user_id": user_id, "attribute_id": attribute_id},
        json=patch,
    )


def attribute_delete(user_id: str, attribute_id: str) -> Call[None]:
    return call(
        "attributes.delete",
        no_content,
        path_params={"user_id": user_id, "attribute_id": attribute_id},
    )


def attribute_history(user_id: str, attribute_id: str) -> Call[AuditList]:
    return call(
        "attributes.history",
        model(AuditList),
        path_params={"user_id": user_id, "attribute_id": attribute_id},
    )


# --- users --------------------------------------------------------------------------------


def user_erase(user_id: str) -> Call[ErasureOut]:
    return call("users.erase", model(ErasureOut), path_params={"user_id": user_id})


def user_export(user_id: str) -> Call[UserExport]:
    return call("users.export", model(UserExport), path_params={"user_id": user_id})


# --- pipeline -----------------------------------------------------------------------------


def extract(
    conversation: Sequence[Message],
    *,
    user_id: str | None,
    store: bool | None,
    extractor: Extractor | None,
    idempotency_key: str | None,
) -> Call[ExtractResponse]:
    return call(
        "extract",
        model(ExtractResponse),
        json=body(
            conversation=_messages(conversation),
            user_id=user_id,
            store=store,
            extractor=extractor,
        ),
        idempotency_key=idempotency_key,
    )


def verify(
    conversation: Sequence[Message], attributes: Sequence[str], *, idempotency_key: str | None
) -> Call[VerifyResponse]:
    return call(
        "verify",
        model(VerifyResponse),
        json=body(conversation=_messages(conversation), attributes=list(attributes)),
        idempotency_key=idempotency_key,
    )


def select(
    prompt: str,
    *,
    user_id: str | None,
    attributes: Sequence[str] | None,
    idempotency_key: str | None,
) -> Call[SelectResponse]:
    return call(
        "select",
        model(SelectResponse),
        json=body(
            prompt=prompt,
            user_id=user_id,
            attributes=None if attributes is None else list(attributes),
        ),
        idempotency_key=idempotency_key,
    )


def generate(
    messages: Sequence[Message],
    *,
    user_id: str | None,
    attributes: Sequence[str] | None,
    include_generic: bool | None,
    max_tokens: int | None,
    temperature: float | None,
    stream: bool,
    idempotency_key: str | None,
) -> Call[GenerateResponse]:
    return call(
        "generate",
        model(GenerateResponse),
        json=body(
            messages=_messages(messages),
            user_id=user_id,
            attributes=None if attributes is None else list(attributes),
            include_generic=include_generic,
            stream=stream or None,
            max_tokens=max_tokens,
            temperature=temperature,
        ),
        idempotency_key=idempotency_key,
    )


def turn(
    user_id: str,
    messages: Sequence[Message],
    *,
    extract: bool | None,
    max_tokens: int | None,
    temperature: float | None,
    stream: bool,
    idempotency_key: str | None,
) -> Call[TurnResponse]:
    return call(
        "turn",
        model(TurnResponse),
        json=body(
            user_id=user_id,
            messages=_messages(messages),
            extract=extract,
            stream=stream or None,
            max_tokens=max_tokens,
            temperature=temperature,
        ),
        idempotency_key=idempotency_key,
    )


def streamed(c: Call[Any]) -> Call[httpx.Response]:
    """``c`` sent for a stream of events: the answer is handed over unread."""
    return Call(
        method=c.method,
        path=c.path,
        parse=keep,
        params=c.params,
        json=c.json,
        idempotency_key=c.idempotency_key,
        stream=True,
        accept="text/event-stream",
    )


# --- jobs ---------------------------------------------------------------------------------


def job_get(job_id: str) -> Call[JobStatusOut]:
    return call("jobs.get", model(JobStatusOut), path_params={"job_id": job_id})


def jobs_page(
    user_id: str, *, status: RunStatus | None, limit: int | None, cursor: str | None
) -> Call[JobList]:
    return call(
        "jobs.list",
        model(JobList),
        path_params={"user_id": user_id},
        params={"status": status, "limit": limit, "cursor": cursor},
    )


# --- evaluation ---------------------------------------------------------------------------


def eval_page(
    *, status: RunStatus | None, limit: int | None, cursor: str | None
) -> Call[EvalRunList]:
    return call(
        "eval.list",
        model(EvalRunList),
        params={"status": status, "limit": limit, "cursor": cursor},
    )


def eval_start(
    *,
    dataset: str | None,
    upload_id: str | None,
    judge: Judge | None,
    splits: Sequence[Literal["general", "specific"]] | None,
    tiers: Sequence[Literal["easy", "medium", "hard"]] | None,
    limit: int | None,
    seed: int | None,
    idempotency_key: str | None,
) -> Call[EvalAccepted]:
    return call(
        "eval.start",
        model(EvalAccepted),
        json=body(
            dataset=dataset,
            upload_id=upload_id,
            judge=judge,
            splits=None if splits is None else list(splits),
            tiers=None if tiers is None else list(tiers),
            limit=limit,
            seed=seed,
        ),
        idempotency_key=idempotency_key,
    )


def eval_get(run_id: str) -> Call[EvalRunOut]:
    return call("eval.get", model(EvalRunOut), path_params={"run_id": run_id})


def eval_report(run_id: str) -> Call[str]:
    return call("eval.report", text, path_params={"run_id": run_id}, accept="text/markdown, */*")


def eval_chart(run_id: str) -> Call[bytes]:
    return call("eval.chart", content, path_params={"run_id": run_id}, accept="image/png, */*")


def eval_upload(
    file: FileInput, *, filename: str | None, idempotency_key: str | None
) -> Call[UploadOut]:
    if isinstance(file, bytes):
        data, name = file, filename
    elif isinstance(file, (str, os.PathLike)):
        path = Path(file)
        data, name = path.read_bytes(), filename or path.name
    else:
        data = file.read()
        given = getattr(file, "name", None)
        name = filename or (Path(given).name if isinstance(given, str) else None)
    return call(
        "eval.upload",
        model(UploadOut),
        files={"file": (upload_name(data, name), data, "application/octet-stream")},
        idempotency_key=idempotency_key,
    )
