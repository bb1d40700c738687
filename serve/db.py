"""The service's own tables, beside the store's: API keys, device leases and task controls.

They share the trajectory store's database (SQLite or PostgreSQL) and have their own Alembic
history (``serve/migrations``, version table ``serve_alembic_version``), so the store's and the
service's schemas move independently. ``migrate`` brings them to the head revision; every
replica may call it at start (the migration lock makes one of them do the work).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from agent.store import lock_for_migration

metadata = sa.MetaData()

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("scopes", sa.String(128), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
    sa.Column("last_used_at", sa.DateTime(timezone=True)),
)

device_leases = sa.Table(
    "device_leases",
    metadata,
    sa.Column("device", sa.String(300), primary_key=True),  # "<adb server>/<serial>"
    sa.Column("episode_id", sa.String(64), nullable=False, index=True),
    sa.Column("replica", sa.String(128), nullable=False, index=True),
    sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)

task_controls = sa.Table(
    "task_controls",
    metadata,
    sa.Column("episode_id", sa.String(64), primary_key=True),
    sa.Column("cancel", sa.Boolean, nullable=False, default=False),
    sa.Column("paused", sa.Boolean, nullable=False, default=False),
    sa.Column("action", sa.JSON),  # a takeover action, in device pixels, waiting for the owner
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


def migrate(engine: sa.Engine) -> None:
    """Bring the service's tables to the newest revision (idempotent, safe across replicas)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as connection:
        lock_for_migration(connection)
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
