"""Job handlers for the tests: each apply writes one attribute, so 'effects exactly once' is a
row count."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.jobs import ClaimedJob, PermanentJobError
from service.store.attributes import AttributeIn, AttributeRepository
from service.store.models import Attribute, User


async def write_marker(session: AsyncSession, job: ClaimedJob, text: str) -> dict[str, Any]:
    user = await session.get(User, job.user_id)
    if user is None or user.tenant_id != job.tenant_id:
        raise PermanentJobError("user is gone")
    row = await AttributeRepository(session, job.tenant_id).create(
        user, AttributeIn(text=text, source="job"), actor=f"job:{job.id}"
    )
    return {"attribute_id": row.id, "text": text}


async def count_markers(session: AsyncSession, text: str) -> int:
    stmt = select(func.count()).select_from(Attribute).where(Attribute.text == text)
    return int(await session.scalar(stmt) or 0)


@dataclass
class MarkerHandler:
    """``payload["text"]`` becomes an attribute of the job's user.

    fail_prepare: that many first prepares raise (RuntimeError); permanent: raise
    PermanentJobError instead; fail_apply: that many first applies write and then raise;
    gate: prepare waits for it (a job that hangs until told to go on)."""

    fail_prepare: int = 0
    permanent: bool = False
    fail_apply: int = 0
    gate: asyncio.Event | None = None
    delay_s: float = 0.0
    prepared: list[tuple[str, int]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def prepare(self, job: ClaimedJob) -> Any:
        self.prepared.append((job.id, job.attempt))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.permanent:
            raise PermanentJobError(f"bad payload for {job.id}")
        if self.fail_prepare > 0:
            self.fail_prepare -= 1
            raise RuntimeError(f"model unavailable (attempt {job.attempt})")
        return str(job.payload["text"])

    async def apply(self, session: AsyncSession, job: ClaimedJob, prepared: Any) -> dict[str, Any]:
        result = await write_marker(session, job, str(prepared))
        if self.fail_apply > 0:
            self.fail_apply -= 1
            await session.flush()  # the write reached the database; the rollback must undo it
            raise RuntimeError("constraint trouble after writing")
        return result

    def prepare_counts(self) -> Counter[str]:
        return Counter(job_id for job_id, _ in self.prepared)
