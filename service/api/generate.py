"""POST /v1/generate"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from service import metrics
from service.api.deps import AuthOnlyDep, LLMDep, StateDep, get_models
from service.api.errors import problem_body
from service.api.pipeline_errors import llm_problem
from service.api.responses import LLM_PROBLEMS
from service.llm.base import LLMError
from service.pipeline import generate as generation
from service.pipeline import turn
from service.pipeline.select import Scored, stored_items
from service.schemas.pipeline import GenerateRequest, GenerateResponse, Usage, UsedAttribute
from service.store.db import transaction

router = APIRouter(prefix="/v1", tags=["pipeline"])

SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "JSON, or with `stream: true` server-sent events: `attributes` (the "
        'attributes used), then `delta` events `{"text"}`, then `done` `{"reply"}`; a '
        "failure after the stream started is an `error` event carrying a problem document.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def used_out(used: list[Scored]) -> list[UsedAttribute]:
    return [UsedAttribute(text=s.text, id=s.id, score=s.score) for s in used]


@router.post(
    "/generate",
    response_model=GenerateResponse,
    responses={**LLM_PROBLEMS, **SSE_DOC},
)
async def generate(
    state: StateDep, caller: AuthOnlyDep, llm: LLMDep, body: GenerateRequest
) -> GenerateResponse | StreamingResponse:
    """A reply to `messages` that adapts to the user's attributes without reciting them.

    With `user_id`, the attributes are selected from the user's stored ones for the last user
    message (as `/v1/select` would); with `attributes`, those are used as given; with neither,
    the reply is generic. `include_generic` also returns the reply without attributes."""
    conversation = [m.model_dump() for m in body.messages]
    settings = state.settings
    if body.user_id is not None:
        models = get_models(state)
        async with transaction(state.sessions) as session:
            items = await stored_items(session, caller.tenant_id, body.user_id)
        used = await turn.choose_attributes(
            models, conversation, items, prefilter_k=settings.select_prefilter_k
        )
    else:
        used = [Scored(t, None, 1.0, None, True) for t in body.attributes or []]
    max_tokens = body.max_tokens or settings.reply_max_tokens
    temperature = settings.reply_temperature if body.temperature is None else body.temperature
    if body.stream:
        deltas = generation.stream(
            llm, conversation, [s.text for s in used], max_tokens=max_tokens,
            temperature=temperature,
        )  # fmt: skip
        return await _event_stream(deltas, used)
    result = await turn.reply(
        llm,
        conversation,
        used,
        max_tokens=max_tokens,
        temperature=temperature,
        include_generic=body.include_generic,
    )
    metrics.GENERATIONS.labels("personalized", "ok").inc()
    completions = [result.completion] + ([result.generic] if result.generic else [])
    if result.generic is not None:
        metrics.GENERATIONS.labels("generic", "ok").inc()
    return GenerateResponse(
        reply=result.completion.text,
        attributes_used=used_out(used),
        generic_reply=result.generic.text if result.generic else None,
        model=result.completion.model,
        usage=Usage(
            prompt_tokens=sum(c.prompt_tokens for c in completions),
            completion_tokens=sum(c.completion_tokens for c in completions),
            latency_s=max(c.latency_s for c in completions),
        ),
    )


def _event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _event_stream(deltas: AsyncGenerator[str, None], used: list[Scored]) -> StreamingResponse:
    # Wait for the first delta before answering: a backend that is down or too slow then gets
    # its proper 503/504 problem response instead of a 200 stream that fails at once.
    try:
        first = await anext(deltas)
    except StopAsyncIteration:
        first = ""
    except LLMError:
        metrics.GENERATIONS.labels("personalized", "error").inc()
        await deltas.aclose()
        raise

    async def events() -> AsyncIterator[bytes]:
        parts = [first]
        async with aclosing(deltas):
            yield _event("attributes", [a.model_dump() for a in used_out(used)])
            if first:
                yield _event("delta", {"text": first})
            try:
                async for delta in deltas:
                    parts.append(delta)
                    yield _event("delta", {"text": delta})
            except LLMError as exc:
                metrics.GENERATIONS.labels("personalized", "error").inc()
                problem = llm_problem(exc)
                yield _event(
                    "error", problem_body(problem.status, problem.detail, slug=problem.slug)
                )
                return
        metrics.GENERATIONS.labels("personalized", "ok").inc()
        yield _event("done", {"reply": "".join(parts)})

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
