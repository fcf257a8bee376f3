"""/v1/users/{user_id}/attributes"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from service.api.deps import (
    IDEMPOTENT,
    AuthOnlyDep,
    CallerDep,
    ExistingUserDep,
    SessionDep,
    StateDep,
    UserIdPath,
)
from service.api.errors import not_found
from service.api.idempotent import remember
from service.api.responses import MODEL_PROBLEMS, PROBLEMS
from service.pipeline import attribute_batch
from service.pipeline.embedding import embed_text
from service.schemas.attributes import (
    AttributeBatchCreate,
    AttributeBatchOut,
    AttributeBatchResult,
    AttributeCreate,
    AttributeList,
    AttributeOut,
    AttributePatch,
    AuditList,
    BatchItemProblem,
    attribute_out,
    audit_out,
)
from service.schemas.common import ID_PATTERN
from service.store.attributes import STATUSES, AttributeIn, AttributeRepository, EvidenceIn
from service.store.db import transaction
from service.store.models import User
from service.store.users import get_or_create_user

router = APIRouter(prefix="/v1/users/{user_id}/attributes", tags=["attributes"])
AttributeIdPath = Annotated[str, Path(pattern=ID_PATTERN)]


@router.get("", response_model=AttributeList, responses=PROBLEMS)
async def list_attributes(
    session: SessionDep,
    caller: CallerDep,
    user: ExistingUserDep,
    status: Annotated[
        Literal["active", "superseded", "deleted", "any"],
        Query(description="Which attributes to list; `any` lists all."),
    ] = "active",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
) -> AttributeList:
    repo = AttributeRepository(session, caller.tenant_id)
    statuses = STATUSES if status == "any" else (status,)
    rows = await repo.list_for(user, statuses=statuses, after_id=cursor, limit=limit + 1)
    page = rows[:limit]
    return AttributeList(
        items=[attribute_out(r, user.external_id) for r in page],
        next_cursor=page[-1].id if len(rows) > limit else None,
    )


@router.post(
    "",
    status_code=201,
    response_model=AttributeOut,
    responses={**PROBLEMS, 429: MODEL_PROBLEMS[429]},
    dependencies=IDEMPOTENT,
)
async def create_attribute(
    state: StateDep,
    caller: AuthOnlyDep,
    user_id: UserIdPath,
    body: AttributeCreate,
    request: Request,
) -> AttributeOut:
    # Embedded before the transaction opens: on SQLite a transaction holds the only write
    # lock, and concurrent writers would queue behind each other's model runs.
    embedding = await embed_text(state.models, body.text)
    async with transaction(state.sessions) as session:
        user = await get_or_create_user(session, caller.tenant_id, user_id)
        repo = AttributeRepository(session, caller.tenant_id)
        row = await repo.create(
            user,
            AttributeIn(
                text=body.text,
                category=body.category,
                source="api",
                evidence=[EvidenceIn(e.message_index, e.quote) for e in body.evidence],
                embedding=embedding,
            ),
            actor=caller.actor,
        )
        out = attribute_out(row, user.external_id)
        await remember(session, request, 201, out)
    return out


@router.post(
    ":batch",
    response_model=AttributeBatchOut,
    responses={**PROBLEMS, 429: MODEL_PROBLEMS[429]},
    dependencies=IDEMPOTENT,
)
async def create_attributes_batch(
    state: StateDep,
    caller: AuthOnlyDep,
    user_id: UserIdPath,
    body: AttributeBatchCreate,
    request: Request,
) -> AttributeBatchOut:
    """Up to 100 attributes in one request (more is a 422 naming `body.items`): their texts
    embedded in one call, all written in one transaction (on any error none is), one result
    per item, in order.

    An item that restates an earlier item of the batch is `rejected` (its `problem` names
    it); one that restates an active attribute of the user is `merged` into it (the stored
    attribute takes the item's new evidence quotes; no second row); any other is `created`.
    A batch never supersedes a stored attribute."""

    async def answer(
        session: AsyncSession, user: User, outcomes: list[attribute_batch.ItemOutcome]
    ) -> AttributeBatchOut:
        out = _batch_out(user.external_id, outcomes)
        await remember(session, request, 200, out)
        return out

    return await attribute_batch.write_batch(
        state.sessions,
        state.models,
        tenant_id=caller.tenant_id,
        user_id=user_id,
        items=[
            AttributeIn(
                text=item.text,
                category=item.category,
                source="api",
                evidence=[EvidenceIn(e.message_index, e.quote) for e in item.evidence],
            )
            for item in body.items
        ],
        actor=caller.actor,
        answer=answer,
    )


def _batch_out(user_id: str, outcomes: list[attribute_batch.ItemOutcome]) -> AttributeBatchOut:
    results = []
    for o in outcomes:
        problem = None
        if o.outcome == "rejected":
            problem = BatchItemProblem(
                type="urn:tailor:problem:duplicate-in-batch",
                title="Duplicate in batch",
                detail=f"restates item {o.duplicate_of} of this batch; nothing written for it",
                field=f"body.items.{o.index}",
            )
        results.append(
            AttributeBatchResult(
                index=o.index,
                outcome=o.outcome,
                attribute=None if o.attribute is None else attribute_out(o.attribute, user_id),
                similarity=None if o.similarity is None else round(o.similarity, 4),
                problem=problem,
            )
        )
    return AttributeBatchOut(
        user_id=user_id,
        results=results,
        created=sum(r.outcome == "created" for r in results),
        merged=sum(r.outcome == "merged" for r in results),
        rejected=sum(r.outcome == "rejected" for r in results),
    )


@router.get("/{attribute_id}", response_model=AttributeOut, responses=PROBLEMS)
async def get_attribute(
    session: SessionDep, caller: CallerDep, user: ExistingUserDep, attribute_id: AttributeIdPath
) -> AttributeOut:
    row = await AttributeRepository(session, caller.tenant_id).get(user, attribute_id)
    if row is None:
        raise not_found("attribute")
    return attribute_out(row, user.external_id)


@router.patch("/{attribute_id}", response_model=AttributeOut, responses=PROBLEMS)
async def patch_attribute(
    session: SessionDep,
    state: StateDep,
    caller: CallerDep,
    user: ExistingUserDep,
    attribute_id: AttributeIdPath,
    body: AttributePatch,
) -> AttributeOut:
    repo = AttributeRepository(session, caller.tenant_id)
    row = await repo.get(user, attribute_id)
    if row is None:
        raise not_found("attribute")
    changes = body.model_dump(exclude_unset=True)
    embedding = await embed_text(state.models, body.text) if body.text is not None else None
    row = await repo.update(row, changes, actor=caller.actor, embedding=embedding)
    return attribute_out(row, user.external_id)


@router.delete("/{attribute_id}", status_code=204, responses=PROBLEMS)
async def delete_attribute(
    session: SessionDep, caller: CallerDep, user: ExistingUserDep, attribute_id: AttributeIdPath
) -> Response:
    repo = AttributeRepository(session, caller.tenant_id)
    row = await repo.get(user, attribute_id)
    if row is None:
        raise not_found("attribute")
    await repo.delete(row, actor=caller.actor)
    return Response(status_code=204)


@router.get("/{attribute_id}/history", response_model=AuditList, responses=PROBLEMS)
async def attribute_history(
    session: SessionDep, caller: CallerDep, user: ExistingUserDep, attribute_id: AttributeIdPath
) -> AuditList:
    entries = await AttributeRepository(session, caller.tenant_id).history(user, attribute_id)
    if not entries:
        raise not_found("attribute")
    return AuditList(items=[audit_out(e) for e in entries])
