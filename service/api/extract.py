"""POST /v1/extract and POST /v1/verify"""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.deps import IDEMPOTENT, AuthOnlyDep, ModelsDep, StateDep
from service.api.idempotent import remember
from service.api.responses import LLM_PROBLEMS, MODEL_PROBLEMS
from service.pipeline import extract as extraction
from service.pipeline.budget import request_budget
from service.pipeline.extract import Outcome
from service.pipeline.extractors import extract_and_judge
from service.pipeline.verify import verify_attributes
from service.schemas.common import EvidenceOut
from service.schemas.pipeline import (
    CandidateOut,
    ExtractRequest,
    ExtractResponse,
    VerdictOut,
    VerifyRequest,
    VerifyResponse,
)
from service.store.db import transaction
from service.store.users import get_or_create_user

router = APIRouter(prefix="/v1", tags=["pipeline"])


@router.post(
    "/extract", response_model=ExtractResponse, responses=LLM_PROBLEMS, dependencies=IDEMPOTENT
)
async def extract(
    state: StateDep, caller: AuthOnlyDep, models: ModelsDep, body: ExtractRequest, request: Request
) -> ExtractResponse:
    """Candidate facts about the user, each with its verdict and what was done with it.

    Every candidate quotes a user message; one whose quote is not in that message is
    `ungrounded`, one the verifier rejects is `unsupported`. With a `user_id` (and `store` not
    false) the supported ones are merged into the user's attributes: a restatement adds
    evidence to the stored attribute, a contradiction supersedes it (both kept in the audit
    log). Nothing is written unless the whole request succeeds."""
    conversation = [m.model_dump() for m in body.conversation]
    settings = state.settings
    budget = request_budget(settings.batch_queue_size, settings.request_max_model_tokens)
    judged = await extract_and_judge(
        conversation, body.extractor, settings, state.llm, models, budget
    )
    store = body.store if body.store is not None else body.user_id is not None
    if not (store and body.user_id is not None):
        return _answer(extraction.not_stored(judged), store, body.user_id)
    async with transaction(state.sessions) as session:
        user = await get_or_create_user(session, caller.tenant_id, body.user_id)
        outcomes = await extraction.store(
            session, caller.tenant_id, user, judged, actor=caller.actor
        )
        out = _answer(outcomes, store, body.user_id)
        await remember(session, request, 200, out)
    return out


def _answer(outcomes: list[Outcome], stored: bool, user_id: str | None) -> ExtractResponse:
    return ExtractResponse(
        candidates=[
            CandidateOut(
                text=o.judged.candidate.text,
                category=o.judged.candidate.category,
                verdict=o.judged.verdict,
                score=o.judged.score,
                evidence=EvidenceOut(
                    message_index=o.judged.candidate.message_index,
                    quote=o.judged.candidate.quote,
                ),
                action=o.action,
                reason=o.judged.reason,
                extractor=o.judged.candidate.source,
                attribute_id=o.attribute_id,
                related_attribute_id=o.related_id,
            )
            for o in outcomes
        ],
        stored=stored,
        user_id=user_id,
    )


@router.post("/verify", response_model=VerifyResponse, responses=MODEL_PROBLEMS)
async def verify(
    state: StateDep, caller: AuthOnlyDep, models: ModelsDep, body: VerifyRequest
) -> VerifyResponse:
    """Stateless verdicts: is each attribute stated by the user in this conversation?

    Each attribute is scored against every user message (with the partner's preceding words
    as context); the best-scoring message is reported. Nothing is stored."""
    conversation = [m.model_dump() for m in body.conversation]
    verdicts = await verify_attributes(
        models,
        conversation,
        body.attributes,
        budget=request_budget(
            state.settings.batch_queue_size, state.settings.request_max_model_tokens
        ),
    )
    return VerifyResponse(
        results=[
            VerdictOut(
                text=v.text,
                verdict="supported" if v.supported else "unsupported",
                score=v.score,
                message_index=v.message_index,
            )
            for v in verdicts
        ],
        threshold=models.classifier("verifier").threshold,
    )
