"""Model registry: versions and aliases.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "model_versions",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("served_name", sa.String(256), nullable=False),
        sa.Column("base", sa.String(1024)),
        sa.Column("adapter", sa.String(1024)),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("info", sa.JSON, nullable=False),
    )
    op.create_table(
        "model_aliases",
        sa.Column("alias", sa.String(64), primary_key=True),
        sa.Column("version", sa.String(256), sa.ForeignKey("model_versions.name"), nullable=False),
        sa.Column("previous", sa.String(256), sa.ForeignKey("model_versions.name")),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_aliases")
    op.drop_table("model_versions")
