"""/v1/users/{user_id}/attributes"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from service.api.deps import (
    IDEMPOTENT,
    CallerDep,
    ExistingUserDep,
    SessionDep,
    StateDep,
    UserIdPath,
)
from service.api.errors import not_found
from service.api.idempotent import remember
from service.api.responses import PROBLEMS
from service.pipeline.embedding import embed_text
from service.schemas.attributes import (
    AttributeCreate,
    AttributeList,
    AttributeOut,
    AttributePatch,
    AuditList,
    attribute_out,
    audit_out,
)
from service.schemas.common import ID_PATTERN
from service.store.attributes import STATUSES, AttributeIn, AttributeRepository, EvidenceIn
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
    "", status_code=201, response_model=AttributeOut, responses=PROBLEMS, dependencies=IDEMPOTENT
)
async def create_attribute(
    session: SessionDep,
    state: StateDep,
    caller: CallerDep,
    user_id: UserIdPath,
    body: AttributeCreate,
    request: Request,
) -> AttributeOut:
    embedding = await embed_text(state.models, body.text)
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
