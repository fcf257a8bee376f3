"""POST /v1/users/{user_id}/attributes:batch: per-item results, one embedding call, one
transaction, tenancy, validation and Idempotency-Key (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from service.inference.embedder import Embedder
from service.schemas.attributes import MAX_BATCH_ITEMS
from service.store.attributes import AttributeRepository
from service.store.db import create_engine
from service.store.models import Attribute, AuditEntry, Evidence, IdempotencyKey
from tests.conftest import Api, bearer

URL = "/v1/users/u/attributes:batch"


class FakeEmbedder:
    """Unit vectors by meaning: texts listed together in ``SAME`` share one vector (cosine 1),
    every other text gets a vector of its own (cosine 0). Records each call."""

    SAME = (
        ("Loves jazz", "Enjoys jazz music", "Is a jazz fan", "Does not love jazz"),
        ("Lives in Paris", "Resides in Paris"),
    )
    to_bytes = staticmethod(Embedder.to_bytes)
    dim = 64

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.axes: dict[str, int] = {}

    def _axis(self, text: str) -> int:
        for group in self.SAME:
            if text in group:
                text = group[0]
        return self.axes.setdefault(text.casefold(), len(self.axes))

    async def aencode(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i, self._axis(text)] = 1.0
        return out


@pytest.fixture
def embedder(api: Api) -> Iterator[FakeEmbedder]:
    fake = FakeEmbedder()
    assert api.app is not None
    state = api.app.state.tailor
    state.models = SimpleNamespace(embedder=fake)
    yield fake
    state.models = None  # the app's shutdown would close it


async def _count(api: Api, model: Any) -> int:
    engine = create_engine(api.db.url, schema=api.db.schema)
    async with engine.connect() as conn:
        n = (await conn.execute(select(func.count()).select_from(model))).scalar_one()
    await engine.dispose()
    return int(n)


async def _counts(api: Api) -> tuple[int, ...]:
    return tuple([await _count(api, m) for m in (Attribute, Evidence, AuditEntry, IdempotencyKey)])


async def test_per_item_results_in_order(api: Api, embedder: FakeEmbedder) -> None:
    h = bearer(await api.new_tenant())
    first = await api.client.post(
        "/v1/users/u/attributes",
        json={
            "text": "Lives in Paris",
            "evidence": [{"message_index": 0, "quote": "I'm in Paris"}],
        },
        headers=h,
    )
    assert first.status_code == 201, first.text
    stored = first.json()
    embedder.calls.clear()

    r = await api.client.post(
        URL,
        json={
            "items": [
                {"text": "Loves jazz", "category": "music"},
                {
                    "text": "Resides in Paris",
                    "evidence": [
                        {"message_index": 2, "quote": "we live in Paris"},
                        {"message_index": 0, "quote": "I'm in Paris"},  # already held
                    ],
                },
                {"text": "  loves   JAZZ "},  # the same text as item 0
                {"text": "Enjoys jazz music"},  # the same meaning as item 0
                {"text": "Has two cats", "evidence": [{"message_index": 1, "quote": "my cats"}]},
            ]
        },
        headers=h,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["user_id"], body["created"], body["merged"], body["rejected"]) == ("u", 2, 1, 2)
    results = body["results"]
    assert [x["index"] for x in results] == [0, 1, 2, 3, 4]
    assert [x["outcome"] for x in results] == [
        "created", "merged", "rejected", "rejected", "created"
    ]  # fmt: skip
    assert embedder.calls == [
        ["Loves jazz", "Resides in Paris", "loves   JAZZ", "Enjoys jazz music", "Has two cats"]
    ]  # one embedder call for every text

    assert results[0]["attribute"]["text"] == "Loves jazz"
    assert results[0]["attribute"]["category"] == "music"
    assert results[0]["problem"] is None

    merged = results[1]
    assert merged["attribute"]["id"] == stored["id"]
    assert merged["attribute"]["text"] == "Lives in Paris"  # the stored text is kept
    assert merged["similarity"] == pytest.approx(1.0)
    assert merged["attribute"]["evidence"] == [
        {"message_index": 0, "quote": "I'm in Paris"},
        {"message_index": 2, "quote": "we live in Paris"},
    ]

    for index in (2, 3):
        assert results[index]["attribute"] is None
        problem = results[index]["problem"]
        assert problem["type"] == "urn:tailor:problem:duplicate-in-batch"
        assert problem["field"] == f"body.items.{index}"
        assert "item 0" in problem["detail"]

    listed = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert [a["text"] for a in listed] == ["Lives in Paris", "Loves jazz", "Has two cats"]
    assert [a["id"] for a in listed[1:]] == [
        results[0]["attribute"]["id"],
        results[4]["attribute"]["id"],
    ]
    history = (
        await api.client.get(f"/v1/users/u/attributes/{stored['id']}/history", headers=h)
    ).json()["items"]
    assert [e["action"] for e in history] == ["created", "evidence_added"]


async def test_a_contradiction_is_created_beside_the_stored_fact(
    api: Api, embedder: FakeEmbedder
) -> None:
    """Cosine alone does not make a restatement (merge.py): a negated fact is created, and a
    batch never supersedes the stored one."""
    h = bearer(await api.new_tenant())
    first = await api.client.post(URL, json={"items": [{"text": "Loves jazz"}]}, headers=h)
    second = await api.client.post(URL, json={"items": [{"text": "Does not love jazz"}]}, headers=h)
    assert [x["outcome"] for x in second.json()["results"]] == ["created"]
    listed = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert [a["text"] for a in listed] == ["Loves jazz", "Does not love jazz"]
    assert listed[0]["id"] == first.json()["results"][0]["attribute"]["id"]
    assert listed[0]["status"] == "active"


async def test_without_an_embedder_exact_texts_still_merge(api: Api) -> None:
    """The API tests' app loads no models: vectors are not stored, the textual rule holds."""
    h = bearer(await api.new_tenant())
    one = await api.client.post(URL, json={"items": [{"text": "Likes tea"}]}, headers=h)
    assert one.status_code == 200, one.text
    again = await api.client.post(
        URL, json={"items": [{"text": "likes tea"}, {"text": "Likes coffee"}]}, headers=h
    )
    assert [x["outcome"] for x in again.json()["results"]] == ["merged", "created"]
    assert again.json()["results"][0]["similarity"] is None
    assert (
        again.json()["results"][0]["attribute"]["id"] == one.json()["results"][0]["attribute"]["id"]
    )
    # Nothing new to add: the merge wrote no audit entry.
    attr_id = one.json()["results"][0]["attribute"]["id"]
    history = (await api.client.get(f"/v1/users/u/attributes/{attr_id}/history", headers=h)).json()[
        "items"
    ]
    assert [e["action"] for e in history] == ["created"]


async def test_a_database_error_writes_nothing(
    api: Api, embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last write of the batch fails after the new rows were flushed: the whole batch,
    the user row and the Idempotency-Key answer roll back; the retry writes it once."""
    h = bearer(await api.new_tenant())
    await api.client.post("/v1/users/u/attributes", json={"text": "Loves jazz"}, headers=h)
    before = await _counts(api)

    real = AttributeRepository.merge_evidence
    failures = [OperationalError("INSERT INTO evidence", {}, Exception("disk I/O error"))]

    async def fail_once(self: AttributeRepository, *args: Any, **kwargs: Any) -> bool:
        if failures:
            raise failures.pop()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(AttributeRepository, "merge_evidence", fail_once)
    batch = {
        "items": [
            {"text": "Has two cats", "evidence": [{"message_index": 0, "quote": "my cats"}]},
            {"text": "Lives in Paris"},
            {"text": "Is a jazz fan", "evidence": [{"message_index": 1, "quote": "jazz!"}]},
        ]
    }
    keyed = h | {"Idempotency-Key": "batch-1"}
    failed = await api.client.post(URL, json=batch, headers=keyed)
    assert failed.status_code == 503, failed.text
    assert failed.headers["content-type"] == "application/problem+json"
    assert await _counts(api) == before
    listed = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert [a["text"] for a in listed] == ["Loves jazz"]

    retried = await api.client.post(URL, json=batch, headers=keyed)
    assert retried.status_code == 200, retried.text
    assert "idempotent-replayed" not in retried.headers
    assert [x["outcome"] for x in retried.json()["results"]] == ["created", "created", "merged"]


async def test_a_new_user_is_rolled_back_with_its_batch(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = bearer(await api.new_tenant())

    async def fail(self: AttributeRepository, *args: Any, **kwargs: Any) -> Any:
        raise OperationalError("INSERT INTO attributes", {}, Exception("database is locked"))

    monkeypatch.setattr(AttributeRepository, "create_many", fail)
    r = await api.client.post(URL, json={"items": [{"text": "a"}]}, headers=h)
    assert r.status_code == 503
    assert (await api.client.get("/v1/users/u/attributes", headers=h)).status_code == 404


async def test_tenancy(api: Api, embedder: FakeEmbedder) -> None:
    """Tenant B's user of the same id is another user: nothing merges across tenants, and
    neither sees the other's attributes."""
    a = bearer(await api.new_tenant("a"))
    b = bearer(await api.new_tenant("b"))
    ra = await api.client.post(URL, json={"items": [{"text": "Loves jazz"}]}, headers=a)
    rb = await api.client.post(
        URL, json={"items": [{"text": "Loves jazz"}, {"text": "Is vegan"}]}, headers=b
    )
    assert [x["outcome"] for x in ra.json()["results"]] == ["created"]
    assert [x["outcome"] for x in rb.json()["results"]] == ["created", "created"]
    a_items = (await api.client.get("/v1/users/u/attributes", headers=a)).json()["items"]
    b_items = (await api.client.get("/v1/users/u/attributes", headers=b)).json()["items"]
    assert [i["id"] for i in a_items] == [ra.json()["results"][0]["attribute"]["id"]]
    assert {i["text"] for i in b_items} == {"Loves jazz", "Is vegan"}
    b_id = rb.json()["results"][0]["attribute"]["id"]
    assert (await api.client.get(f"/v1/users/u/attributes/{b_id}", headers=a)).status_code == 404
    unauthenticated = await api.client.post(URL, json={"items": [{"text": "x"}]})
    assert unauthenticated.status_code == 401


@pytest.mark.parametrize(
    ("items", "field", "kind"),
    [
        ([], "body.items", "too_short"),
        ([{"text": f"fact {i}"} for i in range(MAX_BATCH_ITEMS + 1)], "body.items", "too_long"),
        ([{"text": "a"}] * 3 + [{"text": ""}], "body.items.3.text", "string_too_short"),
        ([{"text": "a"}, {"text": "a\u0000b"}], "body.items.1.text", "string_unstorable"),
        ([{"text": "a", "colour": "red"}], "body.items.0.colour", "extra_forbidden"),
        (
            [{"text": "a", "category": "Not A Slug"}],
            "body.items.0.category",
            "string_pattern_mismatch",
        ),
        (
            [{"text": "a", "evidence": [{"message_index": -1, "quote": "q"}]}],
            "body.items.0.evidence.0.message_index",
            "greater_than_equal",
        ),
        ("not a list", "body.items", "list_type"),
    ],
)
async def test_validation_names_the_field(api: Api, items: Any, field: str, kind: str) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.post(URL, json={"items": items}, headers=h)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert [(e["field"], e["type"]) for e in r.json()["errors"]] == [(field, kind)]
    assert await _count(api, Attribute) == 0


async def test_batch_limit_is_accepted(api: Api) -> None:
    h = bearer(await api.new_tenant())
    items = [{"text": f"fact number {i}"} for i in range(MAX_BATCH_ITEMS)]
    r = await api.client.post(URL, json={"items": items}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["created"] == MAX_BATCH_ITEMS
    assert await _count(api, Attribute) == MAX_BATCH_ITEMS


async def test_bad_user_id_and_method(api: Api) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.post(
        "/v1/users/-bad/attributes:batch", json={"items": [{"text": "a"}]}, headers=h
    )
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["errors"]] == ["path.user_id"]
    r = await api.client.get(URL, headers=h)
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"


async def test_idempotent_replay(api: Api, embedder: FakeEmbedder) -> None:
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "import-7"}
    batch = {"items": [{"text": "Loves jazz"}, {"text": "Is vegan"}, {"text": "Loves jazz"}]}
    first = await api.client.post(URL, json=batch, headers=h)
    assert first.status_code == 200, first.text
    counts = await _counts(api)
    calls = len(embedder.calls)

    second = await api.client.post(URL, json=batch, headers=h)
    assert second.status_code == 200
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json() == first.json()
    assert await _counts(api) == counts  # nothing written
    assert len(embedder.calls) == calls  # nor embedded

    other = await api.client.post(URL, json={"items": [{"text": "Is vegan"}]}, headers=h)
    assert other.status_code == 422
    assert other.json()["type"] == "urn:tailor:problem:idempotency-key-reused"

    # Without the key, the same batch merges into what the first one created.
    unkeyed = {k: v for k, v in h.items() if k != "Idempotency-Key"}
    third = await api.client.post(URL, json=batch, headers=unkeyed)
    assert [x["outcome"] for x in third.json()["results"]] == ["merged", "merged", "rejected"]
    assert await _count(api, Attribute) == 2


async def test_erasure_forgets_the_batch_answer(api: Api) -> None:
    """A stored batch answer belongs to its user: erasing the user removes it too."""
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "k"}
    await api.client.post(URL, json={"items": [{"text": "a"}]}, headers=h)
    assert await _count(api, IdempotencyKey) == 1
    assert (await api.client.delete("/v1/users/u", headers=h)).status_code == 200
    assert await _count(api, IdempotencyKey) == 0
