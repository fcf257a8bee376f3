"""CRUD, pagination and audit history of /v1/users/{user_id}/attributes."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import select

from service.app import create_app
from service.config import REPO_ROOT
from service.inference.embedder import Embedder
from service.store.db import create_engine
from service.store.models import Attribute
from tests.conftest import Api, Database, bearer


async def test_create_get_list(api: Api) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.post(
        "/v1/users/u-1/attributes",
        json={
            "text": "  Is vegetarian ",
            "category": "diet",
            "evidence": [{"message_index": 0, "quote": "I don't eat meat"}],
        },
        headers=h,
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["text"] == "Is vegetarian"
    assert created["status"] == "active"
    assert created["user_id"] == "u-1"
    assert created["evidence"] == [{"message_index": 0, "quote": "I don't eat meat"}]
    assert created["created_at"].endswith("Z") or created["created_at"].endswith("+00:00")

    got = await api.client.get(f"/v1/users/u-1/attributes/{created['id']}", headers=h)
    assert got.status_code == 200
    assert got.json() == created

    listed = await api.client.get("/v1/users/u-1/attributes", headers=h)
    assert listed.status_code == 200
    assert [a["id"] for a in listed.json()["items"]] == [created["id"]]
    assert listed.json()["next_cursor"] is None


async def test_cursor_pagination_visits_each_once(api: Api) -> None:
    h = bearer(await api.new_tenant())
    ids = []
    for i in range(7):
        r = await api.client.post("/v1/users/u/attributes", json={"text": f"fact {i}"}, headers=h)
        ids.append(r.json()["id"])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = (await api.client.get("/v1/users/u/attributes", params=params, headers=h)).json()
        seen += [a["id"] for a in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    assert pages == 3


async def test_patch_delete_and_history(api: Api) -> None:
    h = bearer(await api.new_tenant())
    attr = (
        await api.client.post("/v1/users/u/attributes", json={"text": "Lives in Paris"}, headers=h)
    ).json()
    url = f"/v1/users/u/attributes/{attr['id']}"
    r = await api.client.patch(
        url, json={"text": "Lives in Lyon", "category": "location"}, headers=h
    )
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "Lives in Lyon"
    assert (await api.client.delete(url, headers=h)).status_code == 204

    # Deleted attributes leave the default listing but stay visible with a status filter.
    active = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert active == []
    deleted = (
        await api.client.get("/v1/users/u/attributes", params={"status": "deleted"}, headers=h)
    ).json()["items"]
    assert [a["id"] for a in deleted] == [attr["id"]]

    history = (await api.client.get(f"{url}/history", headers=h)).json()["items"]
    assert [e["action"] for e in history] == ["created", "updated", "deleted"]
    assert history[1]["before"]["text"] == "Lives in Paris"
    assert history[1]["after"]["text"] == "Lives in Lyon"
    assert history[2]["after"]["status"] == "deleted"
    assert all(e["actor"].startswith("key:") for e in history)


async def test_patch_without_change_writes_no_audit(api: Api) -> None:
    h = bearer(await api.new_tenant())
    attr = (await api.client.post("/v1/users/u/attributes", json={"text": "x"}, headers=h)).json()
    url = f"/v1/users/u/attributes/{attr['id']}"
    assert (await api.client.patch(url, json={"text": "x"}, headers=h)).status_code == 200
    history = (await api.client.get(f"{url}/history", headers=h)).json()["items"]
    assert [e["action"] for e in history] == ["created"]


async def test_missing_user_and_attribute_are_404(api: Api) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.get("/v1/users/nobody/attributes", headers=h)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"
    await api.client.post("/v1/users/u/attributes", json={"text": "x"}, headers=h)
    r = await api.client.get("/v1/users/u/attributes/" + "0" * 32, headers=h)
    assert r.status_code == 404
    assert r.json()["detail"] == "attribute not found"


async def test_embedding_is_stored_on_write(clean_db: Database, tmp_path: Path) -> None:
    """With the embedder loaded, the vector is computed when the text is written (create and
    text PATCH) and stored with the attribute."""
    settings = clean_db.settings(
        tmp_path,
        models_dir=tmp_path / "no-classifiers",
        embedder_path=REPO_ROOT / "models" / "embedder",
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            api = Api(client, clean_db, settings)
            h = bearer(await api.new_tenant())
            r = await client.post("/v1/users/u/attributes", json={"text": "Loves dogs"}, headers=h)
            attr_id = r.json()["id"]
            first = await _embedding(clean_db, attr_id)
            await client.patch(
                f"/v1/users/u/attributes/{attr_id}", json={"text": "Stock markets"}, headers=h
            )
            second = await _embedding(clean_db, attr_id)
    v1, v2 = Embedder.from_bytes(first), Embedder.from_bytes(second)
    assert v1.shape == v2.shape == (384,)
    assert abs(float(np.linalg.norm(v1)) - 1.0) < 1e-3
    assert float(v1 @ v2) < 0.5  # the text changed, so did the vector


async def _embedding(db: Database, attr_id: str) -> bytes:
    engine = create_engine(db.url, schema=db.schema)
    async with engine.connect() as conn:
        blob = (
            await conn.execute(select(Attribute.embedding).where(Attribute.id == attr_id))
        ).scalar_one()
    await engine.dispose()
    assert blob is not None
    return bytes(blob)
