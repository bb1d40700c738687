"""Deleted episodes: who deleted which episode, when and why (the episode itself is gone).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "episode_deletions",
        sa.Column("episode_id", sa.String(64), primary_key=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_by", sa.String(128), nullable=False),
        sa.Column("reason", sa.String(256)),
    )
    op.create_index("ix_episode_deletions_deleted_at", "episode_deletions", ["deleted_at"])


def downgrade() -> None:
    op.drop_table("episode_deletions")
