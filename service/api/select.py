"""POST /v1/select"""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import AuthOnlyDep, ModelsDep, StateDep
from service.api.responses import MODEL_PROBLEMS
from service.pipeline.select import DEFAULT_CAP, RELEVANCE, select_for
from service.schemas.pipeline import ScoredAttribute, SelectRequest, SelectResponse

router = APIRouter(prefix="/v1", tags=["pipeline"])


@router.post("/select", response_model=SelectResponse, responses=MODEL_PROBLEMS)
async def select_attributes(
    state: StateDep, caller: AuthOnlyDep, models: ModelsDep, body: SelectRequest
) -> SelectResponse:
    """The attributes relevant to `prompt`, from a stored user or an inline list.

    An embedding prefilter keeps the nearest `TAILOR_SELECT_PREFILTER_K`; the relevance model
    scores those; an attribute is selected at or over the model's calibrated threshold, at
    most `cap` of them. Every attribute is returned: `score` is null for those the prefilter
    left out. An unknown user has no attributes (an empty list, not a 404)."""
    scored = await select_for(
        state.sessions,
        models,
        caller.tenant_id,
        body.prompt,
        user_id=body.user_id,
        attributes=body.attributes,
        prefilter_k=state.settings.select_prefilter_k,
    )
    classifier = models.classifier(RELEVANCE)
    return SelectResponse(
        attributes=[
            ScoredAttribute(
                text=s.text, id=s.id, score=s.score, similarity=s.similarity, selected=s.selected
            )
            for s in scored
        ],
        threshold=classifier.threshold,
        cap=classifier.card.cap or DEFAULT_CAP,
    )
