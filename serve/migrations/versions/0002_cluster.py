"""Device leases and task controls shared by service replicas.

Revision ID: s0002
Revises: s0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "s0002"
down_revision = "s0001"


def upgrade() -> None:
    op.create_table(
        "device_leases",
        sa.Column("device", sa.String(300), primary_key=True),
        sa.Column("episode_id", sa.String(64), nullable=False, index=True),
        sa.Column("replica", sa.String(128), nullable=False, index=True),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "task_controls",
        sa.Column("episode_id", sa.String(64), primary_key=True),
        sa.Column("cancel", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("action", sa.JSON),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("task_controls")
    op.drop_table("device_leases")
