"""Alembic environment: runs migrations on the connection ``TrajectoryStore.migrate`` hands over."""

from __future__ import annotations

from alembic import context

# Imported so that their tables join the metadata.
import agent.jobs
import agent.registry  # noqa: F401
from agent.store import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
