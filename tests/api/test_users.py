"""Per-user erasure and export."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from service.store.db import create_engine, session_factory, transaction
from service.store.models import Base, Job, User
from tests.conftest import Api, bearer


async def _dump_all_tables(api: Api) -> dict[str, list[dict[str, Any]]]:
    engine = create_engine(api.db.url, schema=api.db.schema)
    out: dict[str, list[dict[str, Any]]] = {}
    async with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            rows = (await conn.execute(select(table))).mappings().all()
            out[table.name] = [dict(r) for r in rows]
    await engine.dispose()
    return out


async def _add_job(api: Api, tenant_key: str, external_id: str) -> None:
    """Jobs have no public create route yet; write one the way the pipeline will."""
    engine = create_engine(api.db.url, schema=api.db.schema)
    async with transaction(session_factory(engine)) as s:
        user = (await s.scalars(select(User).where(User.external_id == external_id))).all()
        for u in user:
            from service.store import tenants

            tenant_id = await tenants.authenticate(s, tenant_key)
            if u.tenant_id == tenant_id:
                s.add(
                    Job(
                        tenant_id=u.tenant_id,
                        user_id=u.id,
                        kind="extract",
                        payload={
                            "messages": [{"role": "user", "content": f"secret of {external_id}"}]
                        },
                    )
                )
    await engine.dispose()


async def _populate(api: Api, key: str, user: str) -> None:
    h = bearer(key)
    attr = (
        await api.client.post(
            f"/v1/users/{user}/attributes",
            json={
                "text": f"{user} likes tea",
                "evidence": [{"message_index": 0, "quote": f"{user} says tea"}],
            },
            headers=h | {"Idempotency-Key": f"k-{user}"},
        )
    ).json()
    await api.client.patch(
        f"/v1/users/{user}/attributes/{attr['id']}", json={"text": f"{user} loves tea"}, headers=h
    )
    await api.client.post(f"/v1/users/{user}/attributes", json={"text": f"{user} x"}, headers=h)
    await _add_job(api, key, user)


async def test_erasure_removes_exactly_one_users_rows(api: Api) -> None:
    key_a = await api.new_tenant("a")
    key_b = await api.new_tenant("b")
    await _populate(api, key_a, "victim")
    await _populate(api, key_a, "bystander")
    await _populate(api, key_b, "victim")  # same external id, other tenant

    before = await _dump_all_tables(api)
    victim = next(
        u
        for u in before["users"]
        if u["external_id"] == "victim"
        and u["tenant_id"] in {k["tenant_id"] for k in before["api_keys"] if k["id"] == key_a[4:20]}
    )

    r = await api.client.delete("/v1/users/victim", headers=bearer(key_a))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["user_id"] == "victim"
    assert body["deleted"] == {
        "users": 1,
        "attributes": 2,
        "evidence": 1,
        "audit_entries": 3,
        "jobs": 1,
        "idempotency_keys": 1,
    }

    after = await _dump_all_tables(api)

    def about_victim(table: str, row: dict[str, Any]) -> bool:
        if table == "users":
            return bool(row["id"] == victim["id"])
        if table == "idempotency_keys":
            return bool(row["tenant_id"] == victim["tenant_id"] and row["user_ref"] == "victim")
        return row.get("user_id") == victim["id"]

    for table, rows in before.items():
        expected = [r for r in rows if not about_victim(table, r)]
        assert after[table] == expected, table
        # And no trace of the victim's words survives anywhere in this tenant's rows.
        for row in after[table]:
            if row.get("tenant_id") == victim["tenant_id"]:
                assert "victim" not in repr(row), (table, row)

    # The user is gone: a second erase and an export are 404; the bystander is intact.
    assert (await api.client.delete("/v1/users/victim", headers=bearer(key_a))).status_code == 404
    assert (
        await api.client.get("/v1/users/victim/export", headers=bearer(key_a))
    ).status_code == 404
    kept = await api.client.get("/v1/users/victim/attributes", headers=bearer(key_b))
    assert len(kept.json()["items"]) == 2


async def test_erase_then_reuse_idempotency_key_runs_again(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key) | {"Idempotency-Key": "same"}
    first = await api.client.post("/v1/users/u/attributes", json={"text": "t"}, headers=h)
    await api.client.delete("/v1/users/u", headers=bearer(key))
    again = await api.client.post("/v1/users/u/attributes", json={"text": "t"}, headers=h)
    assert again.status_code == 201
    assert again.json()["id"] != first.json()["id"]
    assert "idempotent-replayed" not in again.headers


async def test_export_has_everything(api: Api) -> None:
    key = await api.new_tenant()
    await _populate(api, key, "u1")
    r = await api.client.get("/v1/users/u1/export", headers=bearer(key))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["user_id"] == "u1"
    assert sorted(a["text"] for a in doc["attributes"]) == ["u1 loves tea", "u1 x"]
    assert [e["action"] for e in doc["audit"]] == ["created", "updated", "created"]
    assert doc["attributes"][0]["evidence"] == [{"message_index": 0, "quote": "u1 says tea"}]
    assert len(doc["jobs"]) == 1
    assert doc["jobs"][0]["payload"]["messages"][0]["content"] == "secret of u1"
