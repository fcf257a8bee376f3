"""POST /v1/turns"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from service.api.deps import IDEMPOTENT, AuthOnlyDep, Caller, LLMDep, StateDep
from service.api.errors import ProblemError
from service.api.generate import used_out
from service.api.idempotent import key_use, remember
from service.api.responses import LLM_PROBLEMS
from service.api.sse import sse_doc, stream_reply
from service.jobs.worker import notify_on_commit
from service.llm.base import LLMClient
from service.pipeline import generate as generation
from service.pipeline import turn
from service.pipeline.select import Scored
from service.pipeline.turn_extraction import EXTRACT_KIND, payload
from service.schemas.pipeline import TurnRequest, TurnResponse, Usage, UsedAttribute
from service.state import AppState
from service.store.db import transaction
from service.store.idempotency import KeyTaken
from service.store.ids import new_id
from service.store.jobs import JobRepository
from service.store.users import get_or_create_user

router = APIRouter(prefix="/v1", tags=["pipeline"])

TURN_SSE_DOC = sse_doc(
    "JSON, or with `stream: true` server-sent events: `attributes` "
    '`{"attributes_used", "job_id"}` (the id the extraction job will have; null with '
    '`extract: false`), then `delta` events `{"text"}`, then `done` `{"reply"}`, sent once '
    "the user row and the job are committed. A failure after the stream started is an "
    "`error` event carrying a problem document, and then nothing was written: no job, no "
    "user. A streamed turn's answer is kept for its Idempotency-Key as the JSON answer, so "
    "a retry with the same key replays that JSON and queues no second job."
)


@router.post(
    "/turns",
    response_model=TurnResponse,
    responses={**LLM_PROBLEMS, **TURN_SSE_DOC},
    dependencies=IDEMPOTENT,
)
async def chat_turn(
    state: StateDep, caller: AuthOnlyDep, llm: LLMDep, body: TurnRequest, request: Request
) -> TurnResponse | StreamingResponse:
    """One chat turn: select the user's attributes for the newest message, reply with them,
    and queue extraction of the new turn as a durable job (never waited for).

    The job is committed once the reply is complete, in the same transaction as the user row,
    and before the answer (or a stream's `done` event) is sent; when the reply fails (LLM down,
    slow or unusable: 503/504/502, or a stream's `error` event) nothing is written at all.
    With `stream: true` the job's id is announced in the first event, before the job exists."""
    conversation = [m.model_dump() for m in body.messages]
    settings = state.settings
    used = await turn.attributes_for(
        state.sessions,
        state.models,
        caller.tenant_id,
        body.user_id,
        conversation,
        prefilter_k=settings.select_prefilter_k,
    )
    max_tokens = body.max_tokens or settings.reply_max_tokens
    temperature = settings.reply_temperature if body.temperature is None else body.temperature
    # Reserved now, written only with the finished reply (a stream names it first).
    job_id = new_id() if body.extract else None
    if body.stream:
        return await _streamed(
            state,
            caller,
            llm,
            request,
            body.user_id,
            conversation,
            used,
            job_id,
            max_tokens=max_tokens,
            temperature=temperature,
        )
    result = await turn.reply(
        llm, conversation, used, max_tokens=max_tokens, temperature=temperature
    )
    c = result.completion
    out = TurnResponse(
        reply=c.text,
        attributes_used=used_out(used),
        job_id=job_id,
        model=c.model,
        usage=Usage(
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            latency_s=c.latency_s,
        ),
    )
    if job_id is not None:
        await _commit(state, caller, request, body.user_id, conversation, out)
    return out


async def _streamed(
    state: AppState,
    caller: Caller,
    llm: LLMClient,
    request: Request,
    user_id: str,
    conversation: Sequence[Mapping[str, str]],
    used: list[Scored],
    job_id: str | None,
    *,
    max_tokens: int,
    temperature: float,
) -> StreamingResponse:
    attributes = used_out(used)
    deltas = generation.stream(
        llm, conversation, [s.text for s in used], max_tokens=max_tokens, temperature=temperature
    )
    started = time.perf_counter()

    async def finish(reply: str) -> dict[str, object]:
        if job_id is None and key_use(request) is None:
            return {}  # nothing to write
        out = _streamed_answer(llm, reply, attributes, job_id, time.perf_counter() - started)
        try:
            await _commit(state, caller, request, user_id, conversation, out)
        except KeyTaken:
            # A duplicate with the same key committed first; this one's write rolled back.
            raise ProblemError(
                409,
                "A request with this Idempotency-Key completed first; nothing was written for "
                "this one. Retry it to get that request's answer.",
                slug="conflict",
            ) from None
        return {}

    opening = {"attributes_used": [a.model_dump() for a in attributes], "job_id": job_id}
    return await stream_reply(deltas, opening, finish=finish)


def _streamed_answer(
    llm: LLMClient,
    reply: str,
    attributes: list[UsedAttribute],
    job_id: str | None,
    latency_s: float,
) -> TurnResponse:
    """The JSON answer equivalent to a completed stream, kept for its Idempotency-Key. A
    stream reports no token counts (0 here) nor the served model's name (the configured one)."""
    model = getattr(llm, "model", None)
    return TurnResponse(
        reply=reply,
        attributes_used=attributes,
        job_id=job_id,
        model=model if isinstance(model, str) else llm.name,
        usage=Usage(prompt_tokens=0, completion_tokens=0, latency_s=round(latency_s, 4)),
    )


async def _commit(
    state: AppState,
    caller: Caller,
    request: Request,
    user_id: str,
    conversation: Sequence[Mapping[str, str]],
    out: TurnResponse,
) -> None:
    """The user row and the extraction job named ``out.job_id``, with ``out`` kept for the
    request's Idempotency-Key, in one transaction: a retry with the same key never queues a
    second job."""
    async with transaction(state.sessions) as session:
        if out.job_id is not None:
            user = await get_or_create_user(session, caller.tenant_id, user_id)
            repo = JobRepository(session, default_max_attempts=state.settings.jobs_max_attempts)
            await repo.enqueue(
                tenant_id=caller.tenant_id,
                user_id=user.id,
                kind=EXTRACT_KIND,
                payload=payload(conversation, None),
                job_id=out.job_id,
            )
            notify_on_commit(session, state.jobs)
        await remember(session, request, 200, out)
