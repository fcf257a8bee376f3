"""Extraction end to end: candidates → grounding → verifier → merge into the user's memory.

Split in two so that the durable job can run the slow half without a database transaction:
``judge`` (extractor, grounding check, verifier, embeddings; no writes) and ``store`` (merge
with the stored attributes; the caller's transaction). The synchronous endpoint calls both in
one request; the per-turn job calls ``judge`` in prepare and ``store`` in apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.ext.asyncio import AsyncSession

from service import metrics
from service.inference import ModelRegistry
from service.inference.embedder import Embedder
from service.pipeline.budget import Budget
from service.pipeline.extraction.types import Candidate, Extractor, quote_is_grounded
from service.pipeline.merge import Stored, decide
from service.pipeline.verify import verify_candidates
from service.store.attributes import AttributeIn, AttributeRepository, EvidenceIn
from service.store.models import User

VerdictWord = Literal["supported", "unsupported", "ungrounded"]
Action = Literal["added", "updated", "superseded", "rejected", "not_stored"]


@dataclass(frozen=True)
class Judged:
    candidate: Candidate
    verdict: VerdictWord
    score: float | None
    reason: str
    vector: NDArray[np.float32] | None = None


@dataclass(frozen=True)
class Outcome:
    judged: Judged
    action: Action
    attribute_id: str | None = None
    # For "updated": the attribute that already held the fact; for "superseded": the one retired.
    related_id: str | None = None


class EmbedderMissing(RuntimeError):
    """Merging needs attribute embeddings; this process runs without an embedder."""


async def judge(
    conversation: Sequence[Mapping[str, str]],
    extractor: Extractor,
    models: ModelRegistry,
    *,
    budget: Budget,
) -> list[Judged]:
    candidates = await extractor.extract(conversation)
    judged: dict[int, Judged] = {}
    to_verify: list[tuple[int, Candidate]] = []
    for i, c in enumerate(candidates):
        if quote_is_grounded(conversation, c.message_index, c.quote):
            to_verify.append((i, c))
        else:
            judged[i] = Judged(c, "ungrounded", None, _ungrounded_reason(conversation, c))
    verdicts = await verify_candidates(
        models, conversation, [c for _, c in to_verify], budget=budget
    )
    supported = [(i, c) for (i, c), v in zip(to_verify, verdicts, strict=True) if v.supported]
    vectors = await _embed(models.embedder, [c.text for _, c in supported])
    vector_of = {i: vectors[k] for k, (i, _) in enumerate(supported)}
    threshold = models.classifier("verifier").threshold
    for (i, c), v in zip(to_verify, verdicts, strict=True):
        if v.supported:
            reason = f"verifier score {v.score:.3f} >= threshold {threshold:.3f}"
            judged[i] = Judged(c, "supported", v.score, reason, vector_of[i])
        else:
            reason = (
                f"verifier score {v.score:.3f} < threshold {threshold:.3f}: the quoted "
                "message does not state this about the user"
            )
            judged[i] = Judged(c, "unsupported", v.score, reason)
    result = [judged[i] for i in range(len(candidates))]
    for j in result:
        metrics.EXTRACTION_CANDIDATES.labels(j.candidate.source, j.verdict).inc()
    return result


async def store(
    session: AsyncSession,
    tenant_id: str,
    user: User,
    judged: Sequence[Judged],
    *,
    actor: str,
) -> list[Outcome]:
    """Merge the supported candidates into the user's active attributes (see merge.py)."""
    repo = AttributeRepository(session, tenant_id)
    await repo.lock_user(user)
    active = await repo.all_active(user)
    known = [
        Stored(a.id, a.text, a.category, Embedder.from_bytes(a.embedding) if a.embedding else None)
        for a in active
    ]
    by_id = {a.id: a for a in active}
    outcomes = []
    for j in judged:
        if j.verdict != "supported":
            outcomes.append(Outcome(j, "rejected"))
            continue
        if j.vector is None:
            raise EmbedderMissing("a supported candidate has no embedding")
        c = j.candidate
        decision = decide(c.text, c.category, j.vector, known)
        evidence = EvidenceIn(c.message_index, c.quote)
        if decision.action == "duplicate" and decision.target_id is not None:
            old = by_id[decision.target_id]
            score = max(old.verifier_score or 0.0, j.score or 0.0)
            await repo.add_evidence(old, evidence, actor=actor, verifier_score=score)
            outcomes.append(Outcome(j, "updated", old.id, old.id))
            continue
        new = await repo.create(
            user,
            AttributeIn(
                text=c.text,
                category=c.category,
                source=f"extract:{c.source}",
                verdict="supported",
                verifier_score=j.score,
                evidence=[evidence],
                embedding=Embedder.to_bytes(j.vector),
            ),
            actor=actor,
        )
        by_id[new.id] = new
        if decision.action == "supersede" and decision.target_id is not None:
            old = by_id[decision.target_id]
            await repo.supersede(old, new, actor=actor)
            known = [k for k in known if k.id != old.id]
            outcomes.append(Outcome(j, "superseded", new.id, old.id))
        else:
            outcomes.append(Outcome(j, "added", new.id))
        known.append(Stored(new.id, new.text, new.category, j.vector))
    for o in outcomes:
        metrics.EXTRACTION_ACTIONS.labels(o.action).inc()
    return outcomes


def not_stored(judged: Sequence[Judged]) -> list[Outcome]:
    """Outcomes for a dry run (``store: false``): nothing is written."""
    return [Outcome(j, "not_stored" if j.verdict == "supported" else "rejected") for j in judged]


async def _embed(embedder: Embedder | None, texts: list[str]) -> NDArray[np.float32]:
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    if embedder is None:
        raise EmbedderMissing("extraction needs the embedder to merge facts; it is not loaded")
    return await embedder.aencode(texts)


def _ungrounded_reason(conversation: Sequence[Mapping[str, str]], c: Candidate) -> str:
    if not 0 <= c.message_index < len(conversation):
        return f"message {c.message_index} does not exist"
    role = conversation[c.message_index].get("role")
    if role != "user":
        return f"message {c.message_index} is an {role} message, not the user's"
    return f"the quote is not in message {c.message_index}"
