"""Alembic environment of the service's own tables (API keys, device leases, task controls); own version table."""

from __future__ import annotations

from alembic import context

from serve.db import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, version_table="serve_alembic_version")
with context.begin_transaction():
    context.run_migrations()
