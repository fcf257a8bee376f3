"""POST /v1/generate"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from service import metrics
from service.api.deps import AuthOnlyDep, LLMDep, StateDep, get_models
from service.api.responses import LLM_PROBLEMS
from service.api.sse import sse_doc, stream_reply
from service.pipeline import generate as generation
from service.pipeline import turn
from service.pipeline.select import Scored
from service.schemas.pipeline import GenerateRequest, GenerateResponse, Usage, UsedAttribute

router = APIRouter(prefix="/v1", tags=["pipeline"])

SSE_DOC = sse_doc(
    "JSON, or with `stream: true` server-sent events: `attributes` (the attributes used), "
    'then `delta` events `{"text"}`, then `done` `{"reply"}`; a failure after the stream '
    "started is an `error` event carrying a problem document."
)


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
        used = await turn.attributes_for(
            state.sessions,
            get_models(state),
            caller.tenant_id,
            body.user_id,
            conversation,
            prefilter_k=settings.select_prefilter_k,
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
        return await stream_reply(deltas, [a.model_dump() for a in used_out(used)])
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
