"""Selection: the few stored attributes that matter for the next prompt.

Two stages, because raw similarity is what users of memory services complain about (it returns
whatever is near, relevant or not) while a cross-encoder on every attribute would cost one model
pair per stored fact on every chat turn:
1. embedding prefilter on the stored vectors (brute force per user; no vector database): with
   the relevance model's adapter (``inference/relevance_adapter.py``, the shipped default), its
   learned score of each attribute for this prompt, keeping the card's ``shortlist`` best (and
   never more than ``prefilter_k``); without one, plain cosine, keeping the ``prefilter_k``
   nearest;
2. the relevance cross-encoder scores (prompt, attribute) for those; the final score is the
   cross-encoder's, or with the adapter the weighted sum of both logits (``combine``); an
   attribute is selected when it reaches the calibrated threshold from the model card, at most
   ``cap`` of them, highest first (the card's cap, tuned with the threshold on held-out users).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service import metrics
from service.inference import ModelRegistry
from service.inference.embedder import Embedder
from service.inference.relevance_adapter import combine
from service.pipeline.extract import EmbedderMissing
from service.store.attributes import AttributeRepository
from service.store.db import read_transaction
from service.store.users import get_user

RELEVANCE = "relevance"
DEFAULT_CAP = 6


@dataclass(frozen=True)
class Item:
    text: str
    id: str | None = None
    vector: NDArray[np.float32] | None = None


@dataclass(frozen=True)
class Scored:
    text: str
    id: str | None
    similarity: float
    # None when the prefilter dropped it (the cross-encoder never saw it).
    score: float | None
    selected: bool


async def select(
    models: ModelRegistry, prompt: str, items: Sequence[Item], *, prefilter_k: int
) -> list[Scored]:
    """Every item with its similarity, score and whether it is selected; the scored ones first,
    by score, then the rest by similarity."""
    if not items:
        return []
    embedder = models.embedder
    if embedder is None:
        raise EmbedderMissing("selection needs the embedder; it is not loaded")
    models.classifier(RELEVANCE)  # a missing model fails here, before any work
    # No stored vector, or one from another embedder (the deployment changed models): embed now.
    missing = [
        i
        for i, item in enumerate(items)
        if item.vector is None or item.vector.shape != (embedder.dim,)
    ]
    texts = [prompt] + [items[i].text for i in missing]
    encoded = await embedder.aencode(texts)
    vectors = [item.vector for item in items]
    for k, i in enumerate(missing):
        vectors[i] = encoded[k + 1]
    matrix = np.stack([v for v in vectors if v is not None])
    return await rank(models, prompt, encoded[0], matrix, items, prefilter_k=prefilter_k)


async def rank(
    models: ModelRegistry,
    prompt: str,
    prompt_vector: NDArray[np.float32],
    matrix: NDArray[np.float32],
    items: Sequence[Item],
    *,
    prefilter_k: int,
) -> list[Scored]:
    """The selection once the vectors exist (the prompt's, and one row of ``matrix`` per
    item): the prefilter, the cross-encoder on the shortlist, the threshold and the cap. This
    is the selector's model work that bench/select_latency.py times."""
    classifier = models.classifier(RELEVANCE)
    adapter = models.relevance_adapter
    similarity = matrix @ prompt_vector
    if adapter is None:
        order, k = similarity, prefilter_k
    else:
        order, k = adapter.logits(prompt_vector, matrix), min(prefilter_k, adapter.card.shortlist)
    shortlist = [int(i) for i in np.argsort(-order, kind="stable")[:k]]
    scores = await models.get(RELEVANCE).submit([(prompt, items[i].text) for i in shortlist])
    if adapter is not None:
        scores = combine(order[shortlist], np.asarray(scores, np.float32), adapter.card.weight)
    cap = classifier.card.cap or DEFAULT_CAP
    ranked = sorted(zip(shortlist, scores, strict=True), key=lambda p: -float(p[1]))
    chosen = {i for i, s in ranked[:cap] if float(s) >= classifier.threshold}
    score_of = {i: float(s) for i, s in ranked}
    out = [
        Scored(items[i].text, items[i].id, float(similarity[i]), score_of[i], i in chosen)
        for i, _ in ranked
    ]
    rest = [i for i in np.argsort(-similarity, kind="stable") if int(i) not in score_of]
    out += [Scored(items[i].text, items[i].id, float(similarity[i]), None, False) for i in rest]
    metrics.SELECTION_ATTRIBUTES.labels("scored").inc(len(shortlist))
    metrics.SELECTION_ATTRIBUTES.labels("prefiltered_out").inc(len(rest))
    metrics.SELECTION_ATTRIBUTES.labels("selected").inc(len(chosen))
    metrics.SELECTION_SELECTED.observe(len(chosen))
    return out


async def stored_items(session: AsyncSession, tenant_id: str, external_id: str) -> list[Item]:
    """The user's active attributes with their stored vectors; none for an unknown user (a
    first chat turn is normal, and another tenant's user is unknown here too)."""
    user = await get_user(session, tenant_id, external_id)
    if user is None:
        return []
    rows = await AttributeRepository(session, tenant_id).active_vectors(user)
    return [
        Item(text, id_, Embedder.from_bytes(blob) if blob else None) for id_, text, blob in rows
    ]


async def user_items(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, external_id: str
) -> list[Item]:
    """``stored_items`` in a read transaction of its own (ended before any model runs)."""
    async with read_transaction(sessions) as session:
        return await stored_items(session, tenant_id, external_id)


async def select_for(
    sessions: async_sessionmaker[AsyncSession],
    models: ModelRegistry,
    tenant_id: str,
    prompt: str,
    *,
    user_id: str | None,
    attributes: Sequence[str] | None,
    prefilter_k: int,
) -> list[Scored]:
    """The selection use case (``POST /v1/select``): a stored user's attributes, or the
    given ones, scored for ``prompt``."""
    if user_id is not None:
        items = await user_items(sessions, tenant_id, user_id)
    else:
        items = [Item(text) for text in attributes or []]
    return await select(models, prompt, items, prefilter_k=prefilter_k)
