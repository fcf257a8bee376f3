"""Many attributes written at once (``POST /v1/users/{user_id}/attributes:batch``).

The texts are embedded in one call, before any transaction is open (on SQLite a transaction
holds the database's only write lock), then every item is written in one transaction: all of
them or, on any error, none. Each item, in order, is

- ``rejected`` when it restates an earlier item of the same batch (the same text up to case and
  spacing, or a duplicate by merge.py's rule: cosine >= 0.85 with the same negation and
  numbers), since the caller sent one fact twice;
- ``merged`` when it restates an active attribute of the user (the same rule): that attribute
  takes the item's evidence quotes it lacks (one ``evidence_added`` audit entry) and no second
  row is made, so sending the same facts again does not duplicate them;
- ``created`` otherwise.

A batch never supersedes: a fact that contradicts a stored one is created beside it, as a single
create would be (PATCH the old one's ``status`` to retire it). Without an embedder only the
textual check applies and the attributes are stored without vectors, as a single create does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.inference import ModelRegistry
from service.inference.embedder import Embedder
from service.pipeline.merge import DUPLICATE_COSINE, Stored, decide
from service.store.attributes import AttributeIn, AttributeRepository
from service.store.db import transaction
from service.store.models import Attribute, User
from service.store.users import get_or_create_user

T = TypeVar("T")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class ItemOutcome:
    index: int
    outcome: Literal["created", "merged", "rejected"]
    attribute: Attribute | None = None  # created: the new one; merged: the stored one
    similarity: float | None = None  # merged: cosine to the stored attribute (when embedded)
    duplicate_of: int | None = None  # rejected: the earlier item it restates


@dataclass(frozen=True)
class _Planned:
    outcome: Literal["created", "merged", "rejected"]
    target: Attribute | None = None
    similarity: float | None = None
    duplicate_of: int | None = None


def normalized(text: str) -> str:
    """The text as compared for restatements without vectors: case and spacing ignored."""
    return _SPACE.sub(" ", text).strip().casefold()


async def embed_texts(
    models: ModelRegistry | None, texts: Sequence[str]
) -> NDArray[np.float32] | None:
    """Every text's vector from one embedder call; None without an embedder."""
    if models is None or models.embedder is None or not texts:
        return None
    return await models.embedder.aencode(list(texts))


async def write_batch(
    sessions: async_sessionmaker[AsyncSession],
    models: ModelRegistry | None,
    *,
    tenant_id: str,
    user_id: str,
    items: Sequence[AttributeIn],
    actor: str,
    answer: Callable[[AsyncSession, User, list[ItemOutcome]], Awaitable[T]],
) -> T:
    """Embed ``items`` (one call), then write them in one transaction; ``answer`` runs in
    that transaction after the writes (it builds the response and may store it with the
    write, for Idempotency-Key) and its result is returned once the transaction commits."""
    vectors = await embed_texts(models, [item.text for item in items])
    async with transaction(sessions) as session:
        user = await get_or_create_user(session, tenant_id, user_id)
        outcomes = await store_batch(session, tenant_id, user, items, vectors, actor=actor)
        return await answer(session, user, outcomes)


async def store_batch(
    session: AsyncSession,
    tenant_id: str,
    user: User,
    items: Sequence[AttributeIn],
    vectors: NDArray[np.float32] | None,
    *,
    actor: str,
) -> list[ItemOutcome]:
    """Decide each item against the earlier ones and the user's active attributes, then write
    the new rows in one flush and the merges (see the module's docstring)."""
    repo = AttributeRepository(session, tenant_id)
    await repo.lock_user(user)  # PostgreSQL: one merge into this user's attributes at a time
    active = await repo.all_active(user)
    by_text: dict[str, Attribute] = {}
    for a in active:
        by_text.setdefault(normalized(a.text), a)
    # Cosines of every item with every stored attribute and every other item, at once; only the
    # pairs at or over the duplicate threshold go to merge.decide (its textual checks are the
    # costly part, and a batch only acts on its "duplicate" verdicts).
    stored: list[Stored] = []
    to_stored: NDArray[np.float32] | None = None
    to_items: NDArray[np.float32] | None = None
    if vectors is not None:
        for a in active:
            vector = Embedder.from_bytes(a.embedding) if a.embedding else None
            if vector is not None and vector.shape == vectors.shape[1:]:
                stored.append(Stored(a.id, a.text, a.category, vector))
        matrix = np.stack([v for s in stored if (v := s.vector) is not None]) if stored else None
        to_stored = None if matrix is None else vectors @ matrix.T
        to_items = vectors @ vectors.T
    by_id = {a.id: a for a in active}

    kept: dict[int, Stored] = {}  # the batch's items not rejected so far, by index
    kept_text: dict[str, int] = {}
    plans: list[_Planned] = []
    for index, item in enumerate(items):
        vector = vectors[index] if vectors is not None else None
        key = normalized(item.text)
        twin = kept_text.get(key)
        if twin is None and vector is not None and to_items is not None:
            close = [kept[j] for j in kept if to_items[index, j] >= DUPLICATE_COSINE]
            decision = decide(item.text, item.category, vector, close)
            if decision.action == "duplicate" and decision.target_id is not None:
                twin = int(decision.target_id)
        if twin is not None:
            plans.append(_Planned("rejected", duplicate_of=twin))
            continue
        target = by_text.get(key)
        similarity: float | None = None
        if target is not None:
            similarity = _cosine(vector, target.embedding)
        elif vector is not None and to_stored is not None:
            close = [stored[k] for k in np.flatnonzero(to_stored[index] >= DUPLICATE_COSINE)]
            decision = decide(item.text, item.category, vector, close)
            if decision.action == "duplicate" and decision.target_id is not None:
                target, similarity = by_id[decision.target_id], decision.similarity
        kept[index] = Stored(str(index), item.text, item.category, vector)
        kept_text[key] = index
        if target is not None:
            plans.append(_Planned("merged", target, similarity))
        else:
            plans.append(_Planned("created"))

    new_items = [
        replace(item, embedding=None if vectors is None else Embedder.to_bytes(vectors[i]))
        for i, (item, plan) in enumerate(zip(items, plans, strict=True))
        if plan.outcome == "created"
    ]
    created = iter(await repo.create_many(user, new_items, actor=actor))
    outcomes: list[ItemOutcome] = []
    for index, (item, plan) in enumerate(zip(items, plans, strict=True)):
        if plan.outcome == "created":
            outcomes.append(ItemOutcome(index, "created", next(created)))
        elif plan.outcome == "merged" and plan.target is not None:
            await repo.merge_evidence(plan.target, item.evidence, actor=actor)
            outcomes.append(ItemOutcome(index, "merged", plan.target, plan.similarity))
        else:
            outcomes.append(ItemOutcome(index, "rejected", duplicate_of=plan.duplicate_of))
    return outcomes


def _cosine(vector: NDArray[np.float32] | None, blob: bytes | None) -> float | None:
    if vector is None or blob is None:
        return None
    stored = Embedder.from_bytes(blob)
    return float(np.dot(vector, stored)) if stored.shape == vector.shape else None
