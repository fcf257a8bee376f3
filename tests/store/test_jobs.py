"""JobRepository on both backends: transactional enqueue, tenant-scoped reads, claiming, the
guarded state changes a worker makes, and taking back stale jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.store import tenants
from service.store.erasure import erase_user
from service.store.jobs import JobRepository
from service.store.models import Job, User, utcnow
from service.store.users import get_or_create_user


async def _tenant_and_user(session: AsyncSession, external_id: str = "u-1") -> tuple[str, User]:
    async with session.begin():
        tenant_id = (await tenants.create_tenant(session, "t")).tenant_id
        user = await get_or_create_user(session, tenant_id, external_id)
    return tenant_id, user


async def _enqueue(session: AsyncSession, tenant_id: str, user_id: str | None, **kw: object) -> Job:
    async with session.begin():
        return await JobRepository(session).enqueue(
            tenant_id=tenant_id,
            user_id=user_id,
            kind=str(kw.pop("kind", "test")),
            payload={"n": 1},
            **kw,  # type: ignore[arg-type]
        )


async def _count_jobs(session: AsyncSession) -> int:
    async with session.begin():
        return int(await session.scalar(select(func.count()).select_from(Job)) or 0)


async def test_enqueue_in_a_rolled_back_transaction_leaves_no_job(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    async with session.begin():
        job = await JobRepository(session).enqueue(
            tenant_id=tenant_id, user_id=user.id, kind="test", payload={"x": 1}
        )
        assert job.id  # flushed: the id exists inside the transaction
        await session.rollback()
    assert await _count_jobs(session) == 0


async def test_enqueue_then_get_is_scoped_by_tenant(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session, "alice")
    other_tenant, _ = await _tenant_and_user(session, "bob")
    job = await _enqueue(session, tenant_id, user.id, max_attempts=3)
    async with session.begin():
        repo = JobRepository(session)
        got = await repo.get(tenant_id, job.id)
        assert got is not None
        assert (got.status, got.attempts, got.max_attempts, got.payload) == (
            "queued",
            0,
            3,
            {"n": 1},
        )
        assert await repo.get(other_tenant, job.id) is None
        assert await repo.get_with_user(other_tenant, job.id) is None
        found = await repo.get_with_user(tenant_id, job.id)
        assert found is not None and found[1] == "alice"


async def test_enqueue_default_and_invalid_max_attempts(session: AsyncSession) -> None:
    tenant_id, _ = await _tenant_and_user(session)
    async with session.begin():
        repo = JobRepository(session, default_max_attempts=7)
        job = await repo.enqueue(tenant_id=tenant_id, user_id=None, kind="k", payload={})
        assert job.max_attempts == 7
        with pytest.raises(ValueError, match="max_attempts"):
            await repo.enqueue(
                tenant_id=tenant_id, user_id=None, kind="k", payload={}, max_attempts=0
            )
        found = await repo.get_with_user(tenant_id, job.id)
        assert found is not None and found[1] is None


async def test_claim_takes_the_oldest_due_job_once(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    first = await _enqueue(session, tenant_id, user.id)
    second = await _enqueue(session, tenant_id, user.id)
    later = await _enqueue(session, tenant_id, user.id)
    async with session.begin():
        await session.execute(
            update(Job).where(Job.id == later.id).values(run_after=utcnow() + timedelta(hours=1))
        )
    claimed = []
    for _ in range(3):
        async with session.begin():
            job = await JobRepository(session).claim("w1")
            claimed.append(
                None if job is None else (job.id, job.status, job.attempts, job.locked_by)
            )
    assert claimed == [
        (first.id, "running", 1, "w1"),
        (second.id, "running", 1, "w1"),
        None,  # the third is not due yet
    ]


async def test_guarded_changes_need_the_owner_and_its_attempt(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    job = await _enqueue(session, tenant_id, user.id)
    async with session.begin():
        await JobRepository(session).claim("w1")
    async with session.begin():
        repo = JobRepository(session)
        assert not await repo.mark_succeeded(job.id, "w2", 1)
        assert not await repo.mark_succeeded(job.id, "w1", 2)
        assert not await repo.heartbeat(job.id, "w2", 1)
        assert await repo.heartbeat(job.id, "w1", 1)
        retry_at = utcnow() + timedelta(seconds=30)
        assert await repo.fail(job.id, "w1", 1, error="boom", retry_at=retry_at)
        # Once failed back to the queue it is no longer owned: a second outcome is refused.
        assert not await repo.mark_succeeded(job.id, "w1", 1)
    async with session.begin():
        row = await JobRepository(session).get(tenant_id, job.id)
        assert row is not None
        await session.refresh(row)
        assert (row.status, row.error, row.locked_by) == ("queued", "boom", None)
        assert abs((row.run_after - retry_at).total_seconds()) < 0.001


async def test_fail_for_good_and_success_store_their_outcome(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    bad = await _enqueue(session, tenant_id, user.id)
    good = await _enqueue(session, tenant_id, user.id)
    async with session.begin():
        repo = JobRepository(session)
        await repo.claim("w")
        await repo.claim("w")
    async with session.begin():
        repo = JobRepository(session)
        assert await repo.fail(bad.id, "w", 1, error="x" * 5000, retry_at=None)
        assert await repo.mark_succeeded(good.id, "w", 1)
        await repo.set_result(good.id, {"written": 2})
    session.expunge_all()
    async with session.begin():
        repo = JobRepository(session)
        b, g = await repo.get(tenant_id, bad.id), await repo.get(tenant_id, good.id)
        assert b is not None and g is not None
        assert (b.status, len(b.error or "")) == ("failed", 2000)
        assert (g.status, g.result, g.error, g.locked_by) == (
            "succeeded",
            {"written": 2},
            None,
            None,
        )


async def test_release_gives_the_attempt_back(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    job = await _enqueue(session, tenant_id, user.id)
    async with session.begin():
        await JobRepository(session).claim("w")
    async with session.begin():
        assert await JobRepository(session).release(job.id, "w", 1)
    session.expunge_all()
    async with session.begin():
        row = await JobRepository(session).get(tenant_id, job.id)
        assert row is not None
        assert (row.status, row.attempts, row.locked_by, row.locked_at) == ("queued", 0, None, None)


async def test_requeue_stale_takes_back_only_expired_locks(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    stale = await _enqueue(session, tenant_id, user.id)
    exhausted = await _enqueue(session, tenant_id, user.id, max_attempts=1)
    fresh = await _enqueue(session, tenant_id, user.id)
    async with session.begin():
        repo = JobRepository(session)
        for _ in range(3):
            await repo.claim("dead")
        old = utcnow() - timedelta(minutes=10)
        await session.execute(
            update(Job).where(Job.id.in_([stale.id, exhausted.id])).values(locked_at=old)
        )
    async with session.begin():
        taken = await JobRepository(session).requeue_stale(timedelta(minutes=5))
    assert sorted((t.id, t.status) for t in taken) == sorted(
        [(stale.id, "queued"), (exhausted.id, "failed")]
    )
    session.expunge_all()
    async with session.begin():
        repo = JobRepository(session)
        rows = {j: await repo.get(tenant_id, j) for j in (stale.id, exhausted.id, fresh.id)}
    s, e, f = (rows[j] for j in (stale.id, exhausted.id, fresh.id))
    assert s is not None and e is not None and f is not None
    assert (s.status, s.locked_by, s.attempts) == ("queued", None, 1)
    assert "dead" in (s.error or "")
    assert e.status == "failed" and "no attempts left" in (e.error or "")
    assert (f.status, f.locked_by) == ("running", "dead")


async def test_queue_depth_counts_queued_jobs_by_kind(session: AsyncSession) -> None:
    tenant_id, user = await _tenant_and_user(session)
    for kind in ("a", "a", "b"):
        await _enqueue(session, tenant_id, user.id, kind=kind)
    async with session.begin():
        await JobRepository(session).claim("w")  # one "a" is running, not queued
        assert await JobRepository(session).queue_depth() == {"a": 1, "b": 1}


async def test_erasure_deletes_the_users_jobs_only(session: AsyncSession) -> None:
    tenant_id, victim = await _tenant_and_user(session, "victim")
    async with session.begin():
        bystander = await get_or_create_user(session, tenant_id, "bystander")
    gone = await _enqueue(session, tenant_id, victim.id)
    kept = await _enqueue(session, tenant_id, bystander.id)
    async with session.begin():
        user = await session.get(User, victim.id)
        assert user is not None
        counts = await erase_user(session, tenant_id, user)
    assert counts["jobs"] == 1
    async with session.begin():
        repo = JobRepository(session)
        assert await repo.get(tenant_id, gone.id) is None
        assert await repo.get(tenant_id, kept.id) is not None
