"""Tenant A's key can never read, list, change, erase or export tenant B's user, even when
both tenants use the same user id; what A sees is identical to a user that does not exist."""

from __future__ import annotations

from tests.conftest import Api, bearer


async def test_other_tenant_user_is_invisible(api: Api) -> None:
    a = bearer(await api.new_tenant("a"))
    b = bearer(await api.new_tenant("b"))
    # Both tenants have a user called "shared"; B also has "only-b".
    await api.client.post("/v1/users/shared/attributes", json={"text": "A's fact"}, headers=a)
    b_attr = (
        await api.client.post("/v1/users/shared/attributes", json={"text": "B's fact"}, headers=b)
    ).json()
    await api.client.post("/v1/users/only-b/attributes", json={"text": "B only"}, headers=b)

    # Same user id: A sees only its own data.
    items = (await api.client.get("/v1/users/shared/attributes", headers=a)).json()["items"]
    assert [i["text"] for i in items] == ["A's fact"]

    b_url = f"/v1/users/shared/attributes/{b_attr['id']}"
    missing = await api.client.get("/v1/users/nobody-at-all/attributes", headers=a)
    for method, url, body in [
        ("GET", b_url, None),
        ("PATCH", b_url, {"text": "hijacked"}),
        ("DELETE", b_url, None),
        ("GET", f"{b_url}/history", None),
        ("GET", "/v1/users/only-b/attributes", None),
        ("GET", "/v1/users/only-b/export", None),
        ("DELETE", "/v1/users/only-b", None),
    ]:
        r = await api.client.request(method, url, json=body, headers=a)
        assert r.status_code == 404, (method, url, r.text)
        if "attributes/" not in url:
            # A user of another tenant looks exactly like a user that does not exist.
            assert {k: v for k, v in r.json().items() if k != "instance"} == {
                k: v for k, v in missing.json().items() if k != "instance"
            }

    # Nothing of B's changed.
    after = (await api.client.get(b_url, headers=b)).json()
    assert after["text"] == "B's fact"
    assert after["status"] == "active"
    history = (await api.client.get(f"{b_url}/history", headers=b)).json()["items"]
    assert [e["action"] for e in history] == ["created"]
    only_b = (await api.client.get("/v1/users/only-b/attributes", headers=b)).json()["items"]
    assert len(only_b) == 1

    # Posting to B's user id from A creates A's own user, never touches B's.
    await api.client.post("/v1/users/only-b/attributes", json={"text": "A writes"}, headers=a)
    only_b = (await api.client.get("/v1/users/only-b/attributes", headers=b)).json()["items"]
    assert [i["text"] for i in only_b] == ["B only"]


async def test_bad_and_revoked_keys_are_401(api: Api) -> None:
    key = await api.new_tenant()
    for headers in [
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic abc"},
        {"Authorization": f"Bearer {key[:-2]}xx"},
    ]:
        r = await api.client.get("/v1/users/u/attributes", headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"] == "Bearer"

    from service.store import tenants
    from service.store.db import create_engine, session_factory, transaction

    engine = create_engine(api.db.url, schema=api.db.schema)
    async with transaction(session_factory(engine)) as s:
        assert await tenants.revoke_key(s, key[4:20])
    await engine.dispose()
    r = await api.client.get("/v1/users/u/attributes", headers=bearer(key))
    assert r.status_code == 401
