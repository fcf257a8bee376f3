"""User-level resources: erasure and export."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from service.schemas.attributes import AttributeOut, AuditEntryOut


class ErasureCounts(BaseModel):
    users: int
    attributes: int
    evidence: int
    audit_entries: int
    jobs: int
    idempotency_keys: int


class ErasureOut(BaseModel):
    user_id: str
    deleted: ErasureCounts


class JobOut(BaseModel):
    id: str
    kind: str
    status: str
    attempts: int
    payload: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    updated_at: datetime


class UserExport(BaseModel):
    user_id: str
    created_at: datetime
    exported_at: datetime
    attributes: list[AttributeOut]
    audit: list[AuditEntryOut]
    jobs: list[JobOut]


class TenantOut(BaseModel):
    tenant_id: str
    name: str
