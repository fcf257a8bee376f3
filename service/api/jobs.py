"""/v1/jobs/{job_id} and /v1/users/{user_id}/jobs"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from service.api.deps import CallerDep, ExistingUserDep, SessionDep
from service.api.errors import not_found
from service.api.responses import PROBLEMS
from service.jobs.errors import public_error
from service.schemas.common import ID_PATTERN
from service.schemas.jobs import JobList, JobStatusOut, job_status_out
from service.store.jobs import JobRepository

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
# A user's jobs live under the user (as the attributes do), so the router has its own prefix.
user_router = APIRouter(prefix="/v1/users/{user_id}/jobs", tags=["jobs"])
JobIdPath = Annotated[str, Path(pattern=ID_PATTERN, description="The id a request returned.")]


@router.get("/{job_id}", response_model=JobStatusOut, responses=PROBLEMS)
async def get_job(session: SessionDep, caller: CallerDep, job_id: JobIdPath) -> JobStatusOut:
    """A background job's status; another tenant's job answers like a missing one (404).
    ``error`` is a short summary of the last failure (never SQL or its parameters)."""
    found = await JobRepository(session).get_with_user(caller.tenant_id, job_id)
    if found is None:
        raise not_found("job")
    job, external_user_id = found
    out = job_status_out(job, external_user_id)
    # Rows written before errors were summarized may hold a database error's full text.
    out.error = public_error(out.error)
    return out


@user_router.get("", response_model=JobList, responses=PROBLEMS)
async def list_user_jobs(
    session: SessionDep,
    caller: CallerDep,
    user: ExistingUserDep,
    status: Annotated[
        Literal["queued", "running", "succeeded", "failed"] | None,
        Query(description="Only jobs in this status; all of them when left out."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
) -> JobList:
    """The user's background jobs, newest first, each as GET /v1/jobs/{job_id} answers it
    (``error`` the last failure's short summary). `limit` and `cursor` paginate."""
    rows = await JobRepository(session).list_for_user(
        caller.tenant_id,
        user.id,
        statuses=None if status is None else (status,),
        before_id=cursor,
        limit=limit + 1,
    )
    page = rows[:limit]
    items = []
    for job in page:
        out = job_status_out(job, user.external_id)
        out.error = public_error(out.error)
        items.append(out)
    return JobList(items=items, next_cursor=page[-1].id if len(rows) > limit else None)
