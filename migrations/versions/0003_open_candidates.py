"""A partial index of the open candidates (pending or leased), in id order: a lease
picks the oldest waiting candidates of a target without walking the done ones.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPEN = sa.text("status IN ('pending', 'leased')")


def upgrade() -> None:
    op.create_index(
        "ix_candidates_open",
        "candidates",
        ["id"],
        unique=False,
        postgresql_where=_OPEN,
        sqlite_where=_OPEN,
    )


def downgrade() -> None:
    op.drop_index("ix_candidates_open", table_name="candidates")
