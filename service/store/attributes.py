"""Attribute repository: every method is scoped by (tenant, user) and every change is audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import Attribute, AuditEntry, Evidence, User, utcnow

STATUSES = ("active", "superseded", "deleted")
MUTABLE_FIELDS = ("text", "category", "status", "verdict", "verifier_score")


@dataclass(frozen=True)
class EvidenceIn:
    message_index: int
    quote: str


@dataclass(frozen=True)
class AttributeIn:
    text: str
    category: str | None = None
    source: str = "api"
    verdict: str | None = None
    verifier_score: float | None = None
    evidence: Sequence[EvidenceIn] = ()
    embedding: bytes | None = None


def snapshot(attribute: Attribute) -> dict[str, Any]:
    """The audited view of an attribute (no embedding: it is derived from the text)."""
    return {
        "text": attribute.text,
        "category": attribute.category,
        "status": attribute.status,
        "verdict": attribute.verdict,
        "verifier_score": attribute.verifier_score,
        "source": attribute.source,
        "superseded_by": attribute.superseded_by,
        "evidence": [
            {"message_index": e.message_index, "quote": e.quote} for e in attribute.evidence
        ],
    }


class AttributeRepository:
    def __init__(self, session: AsyncSession, tenant_id: str) -> None:
        self.session = session
        self.tenant_id = tenant_id

    async def list_for(
        self,
        user: User,
        *,
        statuses: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int = 50,
    ) -> list[Attribute]:
        stmt = select(Attribute).where(
            Attribute.tenant_id == self.tenant_id, Attribute.user_id == user.id
        )
        if statuses:
            stmt = stmt.where(Attribute.status.in_(statuses))
        if after_id is not None:
            stmt = stmt.where(Attribute.id > after_id)
        stmt = stmt.order_by(Attribute.id).limit(limit)
        return list((await self.session.scalars(stmt)).all())

    async def lock_user(self, user: User) -> None:
        """Serialize merges into one user's attributes until the transaction ends: two jobs
        merging at once would both miss the other's new fact and add it twice. (PostgreSQL row
        lock; SQLite transactions already hold the database's write lock.)"""
        await self.session.execute(
            select(User.id)
            .where(User.tenant_id == self.tenant_id, User.id == user.id)
            .with_for_update()
        )

    def _active(self, user: User, *columns: Any) -> Select[Any]:
        """``columns`` of the user's active attributes, oldest first."""
        return (
            select(*columns)
            .where(
                Attribute.tenant_id == self.tenant_id,
                Attribute.user_id == user.id,
                Attribute.status == "active",
            )
            .order_by(Attribute.id)
        )

    async def all_active(self, user: User) -> list[Attribute]:
        """Every active attribute of the user: merging compares a new one against all of them
        (brute force over the stored vectors; a user holds hundreds, not millions)."""
        return list((await self.session.scalars(self._active(user, Attribute))).all())

    async def active_vectors(self, user: User) -> list[tuple[str, str, bytes | None]]:
        """(id, text, stored embedding) of every active attribute, in ``all_active``'s order:
        what selection reads on every chat turn, as plain rows (no ORM objects, no evidence)."""
        stmt = self._active(user, Attribute.id, Attribute.text, Attribute.embedding)
        return [(row.id, row.text, row.embedding) for row in await self.session.execute(stmt)]

    async def get(self, user: User, attribute_id: str) -> Attribute | None:
        stmt = select(Attribute).where(
            Attribute.tenant_id == self.tenant_id,
            Attribute.user_id == user.id,
            Attribute.id == attribute_id,
        )
        return (await self.session.scalars(stmt)).one_or_none()

    async def create(self, user: User, data: AttributeIn, *, actor: str) -> Attribute:
        attribute = self._new(user, data)
        self.session.add(attribute)
        await self.session.flush()
        self._audit(attribute, "created", actor, before=None, after=snapshot(attribute))
        return attribute

    async def create_many(
        self, user: User, items: Sequence[AttributeIn], *, actor: str
    ) -> list[Attribute]:
        """New active attributes, in order, with their evidence and a `created` audit entry
        each. The attributes go out in one flush (one batched INSERT: their ids are made here)
        and the audit entries in one executemany, not one INSERT ... RETURNING per entry."""
        attributes = [self._new(user, data) for data in items]
        self.session.add_all(attributes)
        await self.session.flush()
        if attributes:
            await self.session.execute(
                insert(AuditEntry),
                [
                    self._audit_row(a, "created", actor, before=None, after=snapshot(a))
                    for a in attributes
                ],
            )
        return attributes

    def _new(self, user: User, data: AttributeIn) -> Attribute:
        return Attribute(
            tenant_id=self.tenant_id,
            user_id=user.id,
            text=data.text,
            category=data.category,
            source=data.source,
            verdict=data.verdict,
            verifier_score=data.verifier_score,
            embedding=data.embedding,
            status="active",
            evidence=[
                Evidence(
                    tenant_id=self.tenant_id,
                    user_id=user.id,
                    message_index=e.message_index,
                    quote=e.quote,
                )
                for e in data.evidence
            ],
        )

    async def update(
        self,
        attribute: Attribute,
        changes: dict[str, Any],
        *,
        actor: str,
        embedding: bytes | None = None,
    ) -> Attribute:
        unknown = set(changes) - set(MUTABLE_FIELDS)
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        before = snapshot(attribute)
        for name, value in changes.items():
            setattr(attribute, name, value)
        if "text" in changes:
            attribute.embedding = embedding
        if before == snapshot(attribute):
            return attribute
        attribute.updated_at = utcnow()
        await self.session.flush()
        action = "status_changed" if set(changes) == {"status"} else "updated"
        self._audit(attribute, action, actor, before=before, after=snapshot(attribute))
        return attribute

    async def add_evidence(
        self,
        attribute: Attribute,
        evidence: EvidenceIn,
        *,
        actor: str,
        verifier_score: float | None = None,
    ) -> Attribute:
        """A restatement of a known fact: keep one attribute, add the new quote to it."""
        before = snapshot(attribute)
        attribute.evidence.append(
            Evidence(
                tenant_id=self.tenant_id,
                user_id=attribute.user_id,
                message_index=evidence.message_index,
                quote=evidence.quote,
            )
        )
        if verifier_score is not None:
            attribute.verifier_score = verifier_score
        attribute.updated_at = utcnow()
        await self.session.flush()
        self._audit(attribute, "evidence_added", actor, before=before, after=snapshot(attribute))
        return attribute

    async def merge_evidence(
        self, attribute: Attribute, evidence: Sequence[EvidenceIn], *, actor: str
    ) -> bool:
        """A restatement written through the API: add the quotes the attribute does not hold
        yet, with one `evidence_added` audit entry; False (and nothing written) when it
        already holds them all."""
        held = {(e.message_index, e.quote) for e in attribute.evidence}
        new: list[EvidenceIn] = []
        for e in evidence:
            if (e.message_index, e.quote) not in held:
                held.add((e.message_index, e.quote))
                new.append(e)
        if not new:
            return False
        before = snapshot(attribute)
        for e in new:
            attribute.evidence.append(
                Evidence(
                    tenant_id=self.tenant_id,
                    user_id=attribute.user_id,
                    message_index=e.message_index,
                    quote=e.quote,
                )
            )
        attribute.updated_at = utcnow()
        await self.session.flush()
        self._audit(attribute, "evidence_added", actor, before=before, after=snapshot(attribute))
        return True

    async def supersede(self, old: Attribute, new: Attribute, *, actor: str) -> None:
        before = snapshot(old)
        old.status = "superseded"
        old.superseded_by = new.id
        old.updated_at = utcnow()
        await self.session.flush()
        self._audit(old, "superseded", actor, before=before, after=snapshot(old))

    async def delete(self, attribute: Attribute, *, actor: str) -> None:
        """Soft delete: the row stays (status ``deleted``) so its history stays readable.
        Erasing the user removes it for good."""
        if attribute.status == "deleted":
            return
        before = snapshot(attribute)
        attribute.status = "deleted"
        attribute.updated_at = utcnow()
        await self.session.flush()
        self._audit(attribute, "deleted", actor, before=before, after=snapshot(attribute))

    async def history(self, user: User, attribute_id: str) -> list[AuditEntry]:
        stmt = (
            select(AuditEntry)
            .where(
                AuditEntry.tenant_id == self.tenant_id,
                AuditEntry.user_id == user.id,
                AuditEntry.attribute_id == attribute_id,
            )
            .order_by(AuditEntry.id)
        )
        return list((await self.session.scalars(stmt)).all())

    def _audit(
        self,
        attribute: Attribute,
        action: str,
        actor: str,
        *,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        self.session.add(
            AuditEntry(**self._audit_row(attribute, action, actor, before=before, after=after))
        )

    def _audit_row(
        self,
        attribute: Attribute,
        action: str,
        actor: str,
        *,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "user_id": attribute.user_id,
            "attribute_id": attribute.id,
            "action": action,
            "actor": actor,
            "before": before,
            "after": after,
        }
