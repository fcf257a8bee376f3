"""/v1/users/{user_id}: erasure and export."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import CallerDep, ExistingUserDep, SessionDep
from service.api.responses import PROBLEMS
from service.metrics import USER_ERASURES
from service.schemas.attributes import attribute_out, audit_out
from service.schemas.users import ErasureCounts, ErasureOut, JobOut, UserExport
from service.store.erasure import erase_user, export_user
from service.store.models import utcnow

router = APIRouter(prefix="/v1/users/{user_id}", tags=["users"])


@router.delete("", response_model=ErasureOut, responses=PROBLEMS)
async def erase(session: SessionDep, caller: CallerDep, user: ExistingUserDep) -> ErasureOut:
    """Erase everything held about the user (attributes, evidence, audit entries, jobs,
    stored idempotent answers) in one transaction; returns what was deleted."""
    external_id = user.external_id
    counts = await erase_user(session, caller.tenant_id, user)
    USER_ERASURES.inc()
    return ErasureOut(user_id=external_id, deleted=ErasureCounts(**counts))


@router.get("/export", response_model=UserExport, responses=PROBLEMS)
async def export(session: SessionDep, caller: CallerDep, user: ExistingUserDep) -> UserExport:
    """Everything held about the user, as JSON."""
    data = await export_user(session, caller.tenant_id, user)
    return UserExport(
        user_id=user.external_id,
        created_at=user.created_at,
        exported_at=utcnow(),
        attributes=[attribute_out(a, user.external_id) for a in data["attributes"]],
        audit=[audit_out(a) for a in data["audit"]],
        jobs=[
            JobOut(
                id=j.id,
                kind=j.kind,
                status=j.status,
                attempts=j.attempts,
                payload=j.payload,
                result=j.result,
                error=j.error,
                created_at=j.created_at,
                updated_at=j.updated_at,
            )
            for j in data["jobs"]
        ],
    )
