"""Merging judged candidates into the store, on both databases (no models: the vectors are
given)."""

from __future__ import annotations

import asyncio

import numpy as np

from service.pipeline.extract import Judged, Outcome, not_stored, store
from service.pipeline.extraction.types import Candidate
from service.store import tenants
from service.store.attributes import AttributeRepository
from service.store.db import create_engine, session_factory, transaction
from service.store.users import get_or_create_user, get_user
from tests.conftest import Database


def judged(text: str, verdict: str = "supported", vector: list[float] | None = None) -> Judged:
    v = np.array(vector or [1.0, 0.0, 0.0], dtype=np.float32)
    return Judged(
        Candidate(text, "pets", 0, "I have a cat", "rules"),
        verdict,  # type: ignore[arg-type]
        0.9 if verdict == "supported" else 0.1,
        "test",
        v / np.linalg.norm(v) if verdict == "supported" else None,
    )


async def test_concurrent_merges_add_a_fact_once(clean_db: Database) -> None:
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    factory = session_factory(engine)
    async with transaction(factory) as s:
        tenant = (await tenants.create_tenant(s, "t")).tenant_id
        await get_or_create_user(s, tenant, "u1")

    async def merge() -> list[Outcome]:
        async with transaction(factory) as s:
            user = await get_user(s, tenant, "u1")
            assert user is not None
            out = await store(s, tenant, user, [judged("The user has a cat.")], actor="t")
            await asyncio.sleep(0.3)  # hold the transaction so that the two overlap
            return out

    first, second = await asyncio.gather(merge(), merge())
    assert sorted([first[0].action, second[0].action]) == ["added", "updated"]
    async with transaction(factory) as s:
        user = await get_user(s, tenant, "u1")
        assert user is not None
        rows = await AttributeRepository(s, tenant).all_active(user)
    assert len(rows) == 1 and len(rows[0].evidence) == 2
    await engine.dispose()


async def test_rejected_and_dry_run_write_nothing(clean_db: Database) -> None:
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    factory = session_factory(engine)
    async with transaction(factory) as s:
        tenant = (await tenants.create_tenant(s, "t")).tenant_id
        user = await get_or_create_user(s, tenant, "u1")
        out = await store(
            s, tenant, user, [judged("The user has a dog.", "unsupported")], actor="t"
        )
        assert [o.action for o in out] == ["rejected"]
        assert await AttributeRepository(s, tenant).all_active(user) == []
    assert [o.action for o in not_stored([judged("x"), judged("y", "ungrounded")])] == [
        "not_stored",
        "rejected",
    ]
    await engine.dispose()
