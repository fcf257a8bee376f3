"""/v1/jobs/{job_id}"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.api.deps import CallerDep, SessionDep
from service.api.errors import not_found
from service.api.responses import PROBLEMS
from service.jobs.errors import public_error
from service.schemas.common import ID_PATTERN
from service.schemas.jobs import JobStatusOut, job_status_out
from service.store.jobs import JobRepository

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
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
