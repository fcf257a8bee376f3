"""Job queue repository. The API reads are scoped by tenant; the worker's methods work across
tenants (one queue per database) and every state change a worker makes is guarded by its lock
(``locked_by`` plus the attempt number), so a worker that lost its job writes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, CursorResult, and_, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import Job, User, utcnow

QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
STATUSES = (QUEUED, RUNNING, SUCCEEDED, FAILED)
DEFAULT_MAX_ATTEMPTS = 5
# Errors are short summaries (service/jobs/errors.py); this only guards the column.
MAX_ERROR_CHARS = 2_000


@dataclass(frozen=True)
class StaleJob:
    """A running job taken over from a worker whose lease ran out."""

    id: str
    kind: str
    status: str  # queued again, or failed when its attempts are used up
    worker: str | None  # the worker that held it (for the log; tenants never see it)


class JobRepository:
    def __init__(
        self, session: AsyncSession, *, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> None:
        self.session = session
        self.default_max_attempts = default_max_attempts

    # --- producers and the API ------------------------------------------------------------

    async def enqueue(
        self,
        *,
        tenant_id: str,
        user_id: str | None,
        kind: str,
        payload: dict[str, Any],
        max_attempts: int | None = None,
        job_id: str | None = None,
    ) -> Job:
        """Adds the job in the caller's transaction without committing: it becomes visible to
        workers exactly when the request that created it commits. ``user_id`` is the internal
        ``users.id`` (so erasing the user erases the job); ``job_id`` an id reserved earlier
        (a streamed turn names its job before the reply is done), else a new one."""
        attempts = self.default_max_attempts if max_attempts is None else max_attempts
        if attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        now = utcnow()
        job = Job(
            **({} if job_id is None else {"id": job_id}),
            tenant_id=tenant_id,
            user_id=user_id,
            kind=kind,
            payload=payload,
            status=QUEUED,
            attempts=0,
            max_attempts=attempts,
            run_after=now,
            created_at=now,
            updated_at=now,
        )
        self.session.add(job)
        await self.session.flush()
        return job

    async def get(self, tenant_id: str, job_id: str) -> Job | None:
        stmt = select(Job).where(Job.tenant_id == tenant_id, Job.id == job_id)
        return (await self.session.scalars(stmt)).one_or_none()

    async def get_with_user(self, tenant_id: str, job_id: str) -> tuple[Job, str | None] | None:
        """The job and its user's external id (None for a job without a user)."""
        stmt = (
            select(Job, User.external_id)
            .outerjoin(User, and_(User.id == Job.user_id, User.tenant_id == Job.tenant_id))
            .where(Job.tenant_id == tenant_id, Job.id == job_id)
        )
        row = (await self.session.execute(stmt)).one_or_none()
        return None if row is None else (row[0], row[1])

    async def list_for_user(
        self,
        tenant_id: str,
        user_id: str,
        *,
        statuses: Sequence[str] | None = None,
        before_id: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """One user's jobs (``user_id`` is the internal ``users.id``), newest first: ids are
        time-ordered, so a page continues below the last id of the one before."""
        stmt = select(Job).where(Job.tenant_id == tenant_id, Job.user_id == user_id)
        if statuses:
            stmt = stmt.where(Job.status.in_(statuses))
        if before_id is not None:
            stmt = stmt.where(Job.id < before_id)
        stmt = stmt.order_by(Job.id.desc()).limit(limit)
        return list((await self.session.scalars(stmt)).all())

    # --- workers --------------------------------------------------------------------------

    async def claim(self, worker_id: str, *, now: datetime | None = None) -> Job | None:
        """Takes the oldest due queued job and marks it running for ``worker_id``.

        PostgreSQL: ``FOR UPDATE SKIP LOCKED`` lets concurrent workers each take a different
        row without waiting on one another. SQLite renders no locking clause; its
        ``BEGIN IMMEDIATE`` transactions already admit one writer at a time. The caller commits.
        """
        now = now or utcnow()
        stmt = (
            select(Job)
            .where(Job.status == QUEUED, Job.run_after <= now)
            .order_by(Job.run_after, Job.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        job = (await self.session.scalars(stmt)).one_or_none()
        if job is None:
            return None
        job.status = RUNNING
        job.locked_by = worker_id
        job.locked_at = now
        job.attempts += 1
        job.updated_at = now
        await self.session.flush()
        return job

    def _owned(self, job_id: str, worker_id: str, attempt: int) -> ColumnElement[bool]:
        return and_(
            Job.id == job_id,
            Job.status == RUNNING,
            Job.locked_by == worker_id,
            Job.attempts == attempt,
        )

    async def _guarded(self, job_id: str, worker_id: str, attempt: int, **values: Any) -> bool:
        stmt = (
            update(Job)
            .where(self._owned(job_id, worker_id, attempt))
            .values(updated_at=utcnow(), **values)
            .execution_options(synchronize_session=False)
        )
        result = await self.session.execute(stmt)
        assert isinstance(result, CursorResult)
        return int(result.rowcount) == 1

    async def heartbeat(self, job_id: str, worker_id: str, attempt: int) -> bool:
        """Renews the lease of a job still owned by this worker; False when it was lost."""
        return await self._guarded(job_id, worker_id, attempt, locked_at=utcnow())

    async def mark_succeeded(self, job_id: str, worker_id: str, attempt: int) -> bool:
        """First statement of the transaction that applies the job's effects: on PostgreSQL it
        also holds the row lock until commit, so no sweeper can take the job back meanwhile.
        False (and nothing written) when this worker no longer owns the job."""
        return await self._guarded(
            job_id, worker_id, attempt, status=SUCCEEDED, error=None, locked_by=None, locked_at=None
        )

    async def set_result(self, job_id: str, result: dict[str, Any]) -> None:
        await self.session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(result=result)
            .execution_options(synchronize_session=False)
        )

    async def fail(
        self,
        job_id: str,
        worker_id: str,
        attempt: int,
        *,
        error: str,
        retry_at: datetime | None,
    ) -> bool:
        """Queues the job again at ``retry_at``, or fails it for good when that is None."""
        values: dict[str, Any] = {
            "error": error[:MAX_ERROR_CHARS],
            "locked_by": None,
            "locked_at": None,
        }
        if retry_at is None:
            values["status"] = FAILED
        else:
            values |= {"status": QUEUED, "run_after": retry_at}
        return await self._guarded(job_id, worker_id, attempt, **values)

    async def release(self, job_id: str, worker_id: str, attempt: int) -> bool:
        """Gives a job back untouched (graceful shutdown): queued again now, and the attempt
        it was interrupted in does not count against it."""
        return await self._guarded(
            job_id,
            worker_id,
            attempt,
            status=QUEUED,
            locked_by=None,
            locked_at=None,
            run_after=utcnow(),
            attempts=Job.attempts - 1,
        )

    async def requeue_stale(
        self, lease: timedelta, *, now: datetime | None = None
    ) -> list[StaleJob]:
        """Takes over running jobs whose lease was last renewed more than ``lease`` ago (their
        worker died or hung): queued again at once, or failed when their attempts are used up.
        The error tenants see names neither the worker nor its host."""
        now = now or utcnow()
        stmt = (
            select(Job)
            .where(Job.status == RUNNING, Job.locked_at < now - lease)
            .order_by(Job.locked_at)
            .limit(100)
            .with_for_update(skip_locked=True)
        )
        taken: list[StaleJob] = []
        for job in (await self.session.scalars(stmt)).all():
            worker = job.locked_by
            lost = (
                f"the worker running attempt {job.attempts} stopped renewing its lease "
                "(dead or hung)"
            )
            if job.attempts >= job.max_attempts:
                job.status = FAILED
                job.error = f"{lost}; no attempts left"
            else:
                job.status = QUEUED
                job.error = lost
                job.run_after = now
            job.locked_by = None
            job.locked_at = None
            job.updated_at = now
            taken.append(StaleJob(job.id, job.kind, job.status, worker))
        await self.session.flush()
        return taken

    async def queue_depth(self) -> dict[str, int]:
        """Queued jobs per kind (due or waiting for a retry)."""
        stmt = (
            select(Job.kind, func.count())
            .where(Job.status == QUEUED)
            .group_by(Job.kind)
            .order_by(Job.kind)
        )
        return {kind: int(n) for kind, n in (await self.session.execute(stmt)).all()}
