"""Model registry lineage and history; background jobs and their lock.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="full"))
        batch.add_column(sa.Column("parent", sa.String(256)))
        batch.add_column(sa.Column("endpoint", sa.String(1024)))
        batch.add_column(sa.Column("updated_at", sa.DateTime(timezone=True)))
    op.execute("UPDATE model_versions SET kind = 'adapter' WHERE adapter IS NOT NULL")
    op.execute("UPDATE model_versions SET state = 'candidate' WHERE state = 'registered'")
    op.execute("UPDATE model_versions SET state = 'promoted' WHERE state = 'active'")
    op.create_table(
        "model_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("version", sa.String(256), nullable=False, index=True),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("detail", sa.JSON, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("trigger", sa.String(64), nullable=False),
        # One row per (kind, slot): two schedulers that both see 02:00 arrive create one job.
        sa.Column("slot", sa.String(64)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True)),
        sa.Column("owner", sa.String(256)),
        sa.Column("reason", sa.Text),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.UniqueConstraint("kind", "slot", name="uq_jobs_kind_slot"),
    )
    op.create_table(
        "job_locks",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_locks")
    op.drop_table("jobs")
    op.drop_table("model_events")
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_column("updated_at")
        batch.drop_column("endpoint")
        batch.drop_column("parent")
        batch.drop_column("kind")
