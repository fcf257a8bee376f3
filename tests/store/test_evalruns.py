"""Evaluation runs: tenant-scoped reads, a queued run is claimed once, recovery sees all."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from service.store import evalruns, tenants


async def test_runs_are_tenant_scoped_and_claimed_once(session: AsyncSession) -> None:
    async with session.begin():
        a = (await tenants.create_tenant(session, "a")).tenant_id
        b = (await tenants.create_tenant(session, "b")).tenant_id
        run = await evalruns.create(session, a, {"dataset": "x", "judge": "random"})
        other = await evalruns.create(session, b, {"dataset": "y", "judge": "random"})
    async with session.begin():
        assert (await evalruns.get(session, a, run.id)) is not None
        assert await evalruns.get(session, b, run.id) is None
        assert [r.id for r in await evalruns.unfinished(session)] == [run.id, other.id]
        # Another tenant cannot claim it; the owner claims it once.
        assert not await evalruns.mark_running(session, b, run.id, {"done": 0})
        assert await evalruns.mark_running(session, a, run.id, {"done": 0})
        assert not await evalruns.mark_running(session, a, run.id, {"done": 0})
    async with session.begin():
        await evalruns.finish(
            session, a, run.id, status="succeeded", progress={"done": 1}, results={"n": 1}
        )
    async with session.begin():
        done = await evalruns.get(session, a, run.id)
        assert done is not None
        await session.refresh(done)
        assert (done.status, done.results, done.progress) == ("succeeded", {"n": 1}, {"done": 1})
        assert done.finished_at is not None
        assert [r.id for r in await evalruns.unfinished(session)] == [other.id]
