"""Trajectory schema v1: episodes, steps, episode labels.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "episodes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("goal", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("device_serial", sa.String(128)),
        sa.Column("model_version", sa.String(256)),
        sa.Column("is_successful", sa.Boolean),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("record", sa.JSON, nullable=False),
    )
    for column in ("status", "device_serial", "model_version", "created_at"):
        op.create_index(f"ix_episodes_{column}", "episodes", [column])
    op.create_table(
        "steps",
        sa.Column(
            "episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("screenshot_sha256", sa.String(64)),
        sa.Column("model_version", sa.String(256)),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
    )
    op.create_index("ix_steps_screenshot_sha256", "steps", ["screenshot_sha256"])
    op.create_table(
        "episode_labels",
        sa.Column(
            "episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(256), nullable=False),
    )
    op.create_index("ix_episode_labels_value", "episode_labels", ["value"])


def downgrade() -> None:
    op.drop_table("episode_labels")
    op.drop_table("steps")
    op.drop_table("episodes")
