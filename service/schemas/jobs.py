"""Background job status."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from service.store.models import Job

JobStatus = Literal["queued", "running", "succeeded", "failed"]


class JobStatusOut(BaseModel):
    id: str
    kind: str = Field(description="What the job does, e.g. `extract`.")
    status: JobStatus = Field(
        description="`queued` (waiting, or waiting to retry), `running`, `succeeded`, `failed`."
    )
    attempts: int = Field(description="Attempts started so far.")
    max_attempts: int
    error: str | None = Field(description="The last attempt's error, if it failed.")
    result: dict[str, Any] | None = Field(description="What the job produced once it succeeded.")
    user_id: str | None = Field(description="Your id for the user the job is about, if any.")
    created_at: datetime
    updated_at: datetime
    run_after: datetime = Field(description="Earliest time of the next attempt while queued.")


class JobList(BaseModel):
    items: list[JobStatusOut] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at end.")


def job_status_out(job: Job, external_user_id: str | None) -> JobStatusOut:
    return JobStatusOut(
        id=job.id,
        kind=job.kind,
        status=job.status,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        error=job.error,
        result=job.result,
        user_id=external_user_id,
        created_at=job.created_at,
        updated_at=job.updated_at,
        run_after=job.run_after,
    )
