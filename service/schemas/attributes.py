"""Attribute resources."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.schemas.common import (
    MAX_EVIDENCE,
    AttributeText,
    Category,
    EvidenceOut,
    EvidenceSchema,
    StrictModel,
)

Status = Literal["active", "superseded", "deleted"]


# `text` is stripped, so a text of spaces alone is refused (422) like an empty one: say so in
# the schema (Python's `\s`, as the validator strips), beside the storable-text rule.
NON_BLANK_TEXT_PATTERN = r"^[^\x00]*[^\x00\s][^\x00]*$"


def _non_blank_text(schema: dict[str, Any]) -> None:
    schema["properties"]["text"]["pattern"] = NON_BLANK_TEXT_PATTERN


class AttributeCreate(StrictModel):
    model_config = ConfigDict(json_schema_extra=_non_blank_text)

    text: AttributeText = Field(description="A short third-person statement about the user.")
    category: Category | None = None
    evidence: list[EvidenceSchema] = Field(default_factory=list, max_length=MAX_EVIDENCE)


def _patch_schema(schema: dict[str, Any]) -> None:
    """What the validator below enforces: at least one field, and text and status never null
    (category may be: null clears it)."""
    schema["minProperties"] = 1
    for name in ("text", "status"):
        prop = schema["properties"][name]
        kept = [branch for branch in prop.pop("anyOf") if branch != {"type": "null"}]
        prop.pop("default", None)
        prop.update(kept[0] if len(kept) == 1 else {"anyOf": kept})


class AttributePatch(StrictModel):
    model_config = ConfigDict(json_schema_extra=_patch_schema)

    text: AttributeText | None = None
    category: Category | None = None
    status: Status | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> AttributePatch:
        if not self.model_fields_set:
            raise ValueError("give at least one of text, category, status")
        for name in ("text", "status"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self


MAX_BATCH_ITEMS = 100


class AttributeBatchItem(AttributeCreate):
    """One item of a batch: the fields and rules of a single create."""


class AttributeBatchCreate(StrictModel):
    items: list[AttributeBatchItem] = Field(
        min_length=1,
        max_length=MAX_BATCH_ITEMS,
        description=(
            f"1-{MAX_BATCH_ITEMS} attributes, each as for a single create; all are written in "
            "one transaction or none is."
        ),
    )


class AttributeOut(BaseModel):
    id: str
    user_id: str
    text: str
    category: str | None
    status: Status
    verdict: str | None
    verifier_score: float | None
    source: str
    superseded_by: str | None
    evidence: list[EvidenceOut]
    created_at: datetime
    updated_at: datetime


class AttributeList(BaseModel):
    items: list[AttributeOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at end.")


class BatchItemProblem(BaseModel):
    """Why one item of a batch was not written (RFC 9457 members, for that item only)."""

    type: str = Field(description="`urn:tailor:problem:<slug>`, e.g. `duplicate-in-batch`.")
    title: str
    detail: str
    field: str = Field(description="The item, e.g. `body.items.3`.")


class AttributeBatchResult(BaseModel):
    index: int = Field(description="The item's position in `items`.")
    outcome: Literal["created", "merged", "rejected"] = Field(
        description=(
            "`created`: a new attribute; `merged`: the text restates an active attribute of the "
            "user, which took the item's evidence (`attribute` is that one, updated); "
            "`rejected`: nothing written for this item (`problem` says why)."
        )
    )
    attribute: AttributeOut | None = None
    similarity: float | None = Field(
        default=None,
        description="For `merged`: the cosine between the item and the stored attribute.",
    )
    problem: BatchItemProblem | None = None


class AttributeBatchOut(BaseModel):
    user_id: str
    results: list[AttributeBatchResult] = Field(description="One per item, in order.")
    created: int
    merged: int
    rejected: int


class AuditEntryOut(BaseModel):
    id: int
    attribute_id: str
    action: str
    actor: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    created_at: datetime


class AuditList(BaseModel):
    items: list[AuditEntryOut]


def attribute_out(row: Any, user_id: str) -> AttributeOut:
    """From a ``store.models.Attribute`` row."""
    return AttributeOut(
        id=row.id,
        user_id=user_id,
        text=row.text,
        category=row.category,
        status=row.status,
        verdict=row.verdict,
        verifier_score=row.verifier_score,
        source=row.source,
        superseded_by=row.superseded_by,
        evidence=[EvidenceOut(message_index=e.message_index, quote=e.quote) for e in row.evidence],
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def audit_out(row: Any) -> AuditEntryOut:
    """From a ``store.models.AuditEntry`` row."""
    return AuditEntryOut(
        id=row.id,
        attribute_id=row.attribute_id,
        action=row.action,
        actor=row.actor,
        before=row.before,
        after=row.after,
        created_at=row.created_at,
    )
