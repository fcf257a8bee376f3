"""The job worker: claims due jobs from the database, runs them through their kind's handler,
retries failures with backoff and takes over jobs whose worker died.

A job runs in two parts. ``prepare`` does the slow work (models, LLM) outside any transaction
and may run more than once (after a crash, a lost lease or a retry). ``apply`` writes the
effects in the same transaction that marks the job succeeded, and that transaction first checks
that this worker still owns the job (its worker id and attempt number, the claim's fencing
token), so the effects are committed exactly once.

While ``prepare`` runs, the worker renews the job's lease every ``jobs_heartbeat_s``; a job whose
lease has not been renewed for ``jobs_lease_s`` is taken over by any worker's sweep (every
heartbeat), so a dead worker's job runs again within about lease + heartbeat seconds. A worker
whose renewal finds the job taken over stops its ``prepare`` and writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import secrets
import socket
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from service.config import Settings
from service.jobs.errors import summarize
from service.metrics import JOB_FAILURES, JOB_SECONDS, JOBS_QUEUE_DEPTH, JOBS_TOTAL
from service.store.jobs import FAILED, JobRepository
from service.store.models import Job, utcnow

log = logging.getLogger("tailor.jobs")

# How often a worker looks for jobs whose worker died, at most (it looks every heartbeat): a
# dead worker's job waits for its lease to run out and then up to this long.
MAX_SWEEP_INTERVAL_S = 30.0


@dataclass(frozen=True)
class ClaimedJob:
    id: str
    tenant_id: str
    user_id: str | None  # the internal users.id
    kind: str
    payload: dict[str, Any]
    attempt: int  # 1-based


class PermanentJobError(Exception):
    """Raised by a handler when retrying cannot help (a bad payload): the job fails now."""


class LeaseLost(Exception):
    """This worker's lease on a job ran out and another worker took the job over."""


class JobHandler(Protocol):
    async def prepare(self, job: ClaimedJob) -> Any:
        """The slow part, with no database writes; may raise to be retried with backoff."""
        ...

    async def apply(self, session: AsyncSession, job: ClaimedJob, prepared: Any) -> dict[str, Any]:
        """The database writes, in the transaction that marks the job succeeded. Returns the
        job's result (JSON)."""
        ...


def backoff_delay(attempt: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """Seconds before retrying after failed attempt ``attempt`` (1-based).

    Exponential with "equal jitter": a uniform draw from the upper half of ``base * 2**(n-1)``
    (capped). The halves of successive attempts do not overlap, so the delays never shrink
    below the cap, while replicas that failed together still spread their retries."""
    ceiling = min(max_s, base_s * 2.0 ** min(attempt - 1, 60))
    return ceiling / 2 + rng.random() * ceiling / 2


def default_worker_id() -> str:
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"


def notify_on_commit(session: AsyncSession, worker: JobWorker | None) -> None:
    """Wakes ``worker`` once ``session`` commits: a job enqueued in a request's transaction is
    invisible until then, so notifying any earlier would poll too soon."""
    if worker is None:
        return

    def _committed(_session: Session) -> None:
        worker.notify()

    event.listen(session.sync_session, "after_commit", _committed, once=True)


@dataclass(frozen=True)
class _Claim:
    job: ClaimedJob
    max_attempts: int


def _claimed(job: Job) -> _Claim:
    return _Claim(
        ClaimedJob(
            id=job.id,
            tenant_id=job.tenant_id,
            user_id=job.user_id,
            kind=job.kind,
            payload=dict(job.payload),
            attempt=job.attempts,
        ),
        job.max_attempts,
    )


class JobWorker:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        handlers: Mapping[str, JobHandler],
        *,
        settings: Settings,
        worker_id: str | None = None,
        shutdown_grace_s: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self.worker_id = worker_id or default_worker_id()
        self._sessions = sessions
        self._handlers = dict(handlers)
        self._concurrency = settings.jobs_concurrency
        self._poll_s = settings.jobs_poll_interval_s
        self._lease = timedelta(seconds=settings.jobs_lease_s)
        self._heartbeat_s = settings.jobs_heartbeat_s
        self._sweep_s = min(settings.jobs_heartbeat_s, MAX_SWEEP_INTERVAL_S)
        self._backoff_base_s = settings.jobs_backoff_base_s
        self._backoff_max_s = settings.jobs_backoff_max_s
        self._shutdown_grace_s = shutdown_grace_s
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._running: dict[asyncio.Task[None], _Claim] = {}
        self._last_sweep = -math.inf
        self._last_depth = -math.inf
        self._depth_kinds: set[str] = set(self._handlers)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._loop_task is not None:
            raise RuntimeError("worker already started")
        self._stopping = False
        self._loop_task = asyncio.create_task(self._loop(), name=f"jobs:{self.worker_id}")
        log.info("job worker %s started: kinds %s", self.worker_id, sorted(self._handlers))

    async def aclose(self) -> None:
        """Stops claiming, lets running jobs finish for up to the grace period, then cancels
        the rest and gives them back to the queue for another worker."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            try:
                await asyncio.wait_for(self._loop_task, timeout=self._shutdown_grace_s)
            except TimeoutError:
                log.warning("job worker %s: poll did not stop in time", self.worker_id)
            except Exception:
                log.exception("job worker %s: poll loop failed", self.worker_id)
        running = dict(self._running)
        if running:
            _, pending = await asyncio.wait(running, timeout=self._shutdown_grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in pending:
                await self._release(running[task].job)
        log.info("job worker %s stopped", self.worker_id)

    def notify(self) -> None:
        """A job was just enqueued (and committed): poll now rather than at the next tick."""
        self._wake.set()

    async def readiness(self) -> str | None:
        if self._loop_task is not None and self._loop_task.done() and not self._stopping:
            return "job worker stopped"
        return None

    async def run_once(self) -> bool:
        """Takes back stale jobs, then claims and runs one due job, if any, to its outcome."""
        await self._sweep()
        claim = await self._claim()
        if claim is not None:
            await self._execute(claim)
        await self._refresh_depth()
        return claim is not None

    # --- polling --------------------------------------------------------------------------

    async def _loop(self) -> None:
        failures = 0
        while not self._stopping:
            self._wake.clear()
            wait_s = self._poll_s
            try:
                await self._poll()
                failures = 0
            except Exception:
                # A database outage must not end the worker: log it and try again, less often
                # the longer it lasts (up to the sweep interval).
                failures += 1
                wait_s = min(self._poll_s * 2.0 ** min(failures, 10), MAX_SWEEP_INTERVAL_S)
                log.exception("job worker %s: poll failed (%d in a row)", self.worker_id, failures)
            if self._stopping:
                break
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait_s)

    async def _poll(self) -> None:
        if time.monotonic() - self._last_sweep >= self._sweep_s:
            await self._sweep()
        while not self._stopping and len(self._running) < self._concurrency:
            claim = await self._claim()
            if claim is None:
                break
            task = asyncio.create_task(self._run(claim), name=f"job:{claim.job.id}")
            self._running[task] = claim
            task.add_done_callback(self._finished)
        # Every finished job wakes the loop; the gauge needs no more than one count per tick.
        if time.monotonic() - self._last_depth >= self._poll_s:
            await self._refresh_depth()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._wake.set()  # a slot is free

    async def _claim(self) -> _Claim | None:
        async with self._sessions() as session, session.begin():
            job = await JobRepository(session).claim(self.worker_id)
            return None if job is None else _claimed(job)

    async def _sweep(self) -> None:
        self._last_sweep = time.monotonic()
        async with self._sessions() as session, session.begin():
            taken = await JobRepository(session).requeue_stale(self._lease)
        for stale in taken:
            JOB_FAILURES.labels(stale.kind).inc()
            outcome = "failed" if stale.status == FAILED else "retried"
            JOBS_TOTAL.labels(stale.kind, outcome).inc()
            log.warning(
                "job %s (%s): worker %s stopped renewing its lease, now %s",
                stale.id,
                stale.kind,
                stale.worker,
                stale.status,
            )

    async def _refresh_depth(self) -> None:
        self._last_depth = time.monotonic()
        async with self._sessions() as session, session.begin():
            depth = await JobRepository(session).queue_depth()
        self._depth_kinds |= set(depth)
        for kind in self._depth_kinds:
            JOBS_QUEUE_DEPTH.labels(kind).set(depth.get(kind, 0))

    # --- running one job ------------------------------------------------------------------

    async def _run(self, claim: _Claim) -> None:
        try:
            await self._execute(claim)
        except Exception:
            # Only reached when even recording the outcome failed (database down): the job
            # stays running and is taken back once its lease runs out.
            log.exception("job %s: could not record its outcome", claim.job.id)

    async def _execute(self, claim: _Claim) -> None:
        job = claim.job
        started = time.perf_counter()
        try:
            handler = self._handlers.get(job.kind)
            if handler is None:
                error = f"unknown job kind '{job.kind}': no handler is registered for it"
                await self._failed(claim, error, permanent=True)
                return
            try:
                prepared = await self._prepare(handler, job)
                applied = await self._apply(handler, job, prepared)
            except LeaseLost:
                log.warning(
                    "job %s (%s) attempt %d: lease lost to another worker; stopped, nothing "
                    "written",
                    job.id,
                    job.kind,
                    job.attempt,
                )
                return
            except PermanentJobError as exc:
                # The full error stays in the log; the job (and its tenant) gets a summary.
                log.warning(
                    "job %s (%s) attempt %d failed for good",
                    job.id,
                    job.kind,
                    job.attempt,
                    exc_info=True,
                )
                await self._failed(claim, summarize(exc, with_type=False), permanent=True)
                return
            except Exception as exc:
                log.warning(
                    "job %s (%s) attempt %d failed", job.id, job.kind, job.attempt, exc_info=True
                )
                await self._failed(claim, summarize(exc), permanent=False)
                return
            if applied:
                JOBS_TOTAL.labels(job.kind, "succeeded").inc()
            else:
                log.warning(
                    "job %s (%s): lost to another worker before it was applied; discarded",
                    job.id,
                    job.kind,
                )
        finally:
            JOB_SECONDS.labels(job.kind).observe(time.perf_counter() - started)

    async def _apply(self, handler: JobHandler, job: ClaimedJob, prepared: Any) -> bool:
        async with self._sessions() as session, session.begin():
            repo = JobRepository(session)
            if not await repo.mark_succeeded(job.id, self.worker_id, job.attempt):
                return False
            result = await handler.apply(session, job, prepared)
            await repo.set_result(job.id, result)
        return True

    async def _failed(self, claim: _Claim, error: str, *, permanent: bool) -> None:
        job = claim.job
        final = permanent or job.attempt >= claim.max_attempts
        retry_at = None
        if not final:
            delay = backoff_delay(job.attempt, self._backoff_base_s, self._backoff_max_s, self._rng)
            retry_at = utcnow() + timedelta(seconds=delay)
        async with self._sessions() as session, session.begin():
            owned = await JobRepository(session).fail(
                job.id, self.worker_id, job.attempt, error=error, retry_at=retry_at
            )
        if not owned:
            log.warning("job %s: lost to another worker before its failure was recorded", job.id)
            return
        JOB_FAILURES.labels(job.kind).inc()
        JOBS_TOTAL.labels(job.kind, "failed" if final else "retried").inc()
        if final:
            log.error("job %s (%s) failed for good: %s", job.id, job.kind, error)

    async def _release(self, job: ClaimedJob) -> None:
        try:
            async with self._sessions() as session, session.begin():
                await JobRepository(session).release(job.id, self.worker_id, job.attempt)
        except Exception:
            log.exception("job %s: could not give it back; its lease will", job.id)

    async def _prepare(self, handler: JobHandler, job: ClaimedJob) -> Any:
        """Runs ``prepare`` while renewing the job's lease every heartbeat, so the lease only
        has to outlast a dead worker, not the slowest job. Raises ``LeaseLost`` as soon as a
        renewal finds the job taken over (its ``prepare`` is cancelled: the new owner redoes
        it, and this worker's result could not be applied anyway)."""
        work: asyncio.Future[Any] = asyncio.ensure_future(handler.prepare(job))
        renewing = asyncio.create_task(self._renew(job), name=f"job-heartbeat:{job.id}")
        try:
            await asyncio.wait((work, renewing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost = renewing.done() and not work.done()
            work.cancel()
            renewing.cancel()
            await asyncio.gather(work, renewing, return_exceptions=True)
        if lost:
            raise LeaseLost(job.id)
        return work.result()

    async def _renew(self, job: ClaimedJob) -> None:
        """Renews the job's lease every heartbeat; returns once the job is no longer this
        worker's. A renewal that fails (database down) is logged and tried again: the lease
        is lost only if no renewal gets through for a whole lease."""
        while True:
            await asyncio.sleep(self._heartbeat_s)
            try:
                async with self._sessions() as session, session.begin():
                    owned = await JobRepository(session).heartbeat(
                        job.id, self.worker_id, job.attempt
                    )
            except Exception as exc:
                log.warning("job %s: could not renew its lease: %s", job.id, summarize(exc))
                continue
            if not owned:
                return
