"""API keys.

Revision ID: s0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "s0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.Column("last_used_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
