"""health_checks: the row /readyz rewrites to prove the database takes a write

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 18:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "health_checks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_health_checks")),
    )


def downgrade() -> None:
    op.drop_table("health_checks")
