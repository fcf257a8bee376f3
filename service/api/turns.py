"""POST /v1/turns"""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.deps import IDEMPOTENT, AuthOnlyDep, LLMDep, StateDep
from service.api.generate import used_out
from service.api.idempotent import remember
from service.api.responses import LLM_PROBLEMS
from service.jobs.worker import notify_on_commit
from service.pipeline import turn
from service.pipeline.select import stored_items
from service.pipeline.turn_extraction import EXTRACT_KIND, payload
from service.schemas.pipeline import TurnRequest, TurnResponse, Usage
from service.store.db import transaction
from service.store.jobs import JobRepository
from service.store.users import get_or_create_user

router = APIRouter(prefix="/v1", tags=["pipeline"])


@router.post("/turns", response_model=TurnResponse, responses=LLM_PROBLEMS, dependencies=IDEMPOTENT)
async def chat_turn(
    state: StateDep, caller: AuthOnlyDep, llm: LLMDep, body: TurnRequest, request: Request
) -> TurnResponse:
    """One chat turn: select the user's attributes for the newest message, reply with them,
    and queue extraction of the new turn as a durable job (never waited for).

    The job is committed before this answers, in the same transaction as the user row; when
    the reply fails (LLM down, slow or unusable: 503/504/502) nothing is written at all."""
    conversation = [m.model_dump() for m in body.messages]
    settings = state.settings
    async with transaction(state.sessions) as session:
        items = await stored_items(session, caller.tenant_id, body.user_id)
    used = await turn.choose_attributes(
        state.models, conversation, items, prefilter_k=settings.select_prefilter_k
    )
    result = await turn.reply(
        llm,
        conversation,
        used,
        max_tokens=body.max_tokens or settings.reply_max_tokens,
        temperature=settings.reply_temperature if body.temperature is None else body.temperature,
    )
    c = result.completion

    def answer(job_id: str | None) -> TurnResponse:
        return TurnResponse(
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

    if not body.extract:
        return answer(None)
    async with transaction(state.sessions) as session:
        user = await get_or_create_user(session, caller.tenant_id, body.user_id)
        repo = JobRepository(session, default_max_attempts=settings.jobs_max_attempts)
        job = await repo.enqueue(
            tenant_id=caller.tenant_id,
            user_id=user.id,
            kind=EXTRACT_KIND,
            payload=payload(conversation, None),
        )
        out = answer(job.id)
        # In the job's transaction: a retry with the same key never queues a second job.
        await remember(session, request, 200, out)
        notify_on_commit(session, state.jobs)
    return out
