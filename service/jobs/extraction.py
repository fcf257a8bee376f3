"""The per-turn extraction job: ``prepare`` runs the extractor, the grounding check, the
verifier and the embedder (seconds, no database); ``apply`` merges the verdicts into the user's
attributes in the transaction that marks the job done, so a crash between the two repeats the
model work but never the writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.inference import ModelNotLoaded
from service.jobs.worker import ClaimedJob, PermanentJobError
from service.pipeline import extract as extraction
from service.pipeline.budget import OverBudget, request_budget
from service.pipeline.extract import Judged
from service.pipeline.extractors import NoLLMForExtraction, extract_and_judge
from service.pipeline.turn_extraction import shift
from service.store.users import get_user_by_id

if TYPE_CHECKING:
    from service.state import AppState


class ExtractionJob:
    def __init__(self, state: AppState) -> None:
        self.state = state

    async def prepare(self, job: ClaimedJob) -> list[Judged]:
        models = self.state.models
        if models is None:
            raise PermanentJobError("this process runs without models; extraction needs them")
        conversation = job.payload.get("conversation")
        offset = job.payload.get("offset", 0)
        if not isinstance(conversation, list) or not isinstance(offset, int):
            raise PermanentJobError("payload needs a conversation list and an integer offset")
        settings = self.state.settings
        budget = request_budget(settings.batch_queue_size, settings.job_max_model_tokens)
        try:
            judged = await extract_and_judge(
                conversation, job.payload.get("extractor"), settings, self.state.llm, models, budget
            )
        except (NoLLMForExtraction, ModelNotLoaded, OverBudget) as exc:
            raise PermanentJobError(str(exc)) from exc
        return shift(judged, offset)

    async def apply(self, session: AsyncSession, job: ClaimedJob, prepared: Any) -> dict[str, Any]:
        if job.user_id is None:
            raise PermanentJobError("an extraction job needs a user")
        user = await get_user_by_id(session, job.tenant_id, job.user_id)
        if user is None:  # erased while the job waited; its rows went with it
            return {"skipped": "user no longer exists"}
        outcomes = await extraction.store(
            session, job.tenant_id, user, prepared, actor=f"job:{job.id}"
        )
        return {
            "candidates": [
                {
                    "text": o.judged.candidate.text,
                    "verdict": o.judged.verdict,
                    "score": o.judged.score,
                    "action": o.action,
                    "attribute_id": o.attribute_id,
                    "message_index": o.judged.candidate.message_index,
                    "reason": o.judged.reason,
                }
                for o in outcomes
            ]
        }
