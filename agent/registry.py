"""The model registry: immutable model versions and movable aliases, in the trajectory database.

A version is a checkpoint, or a base plus an adapter, under the name vLLM serves it by
(``served_name``). Aliases (``default``, ``candidate``...) point at versions; moving an alias
remembers where it pointed before, so a rollback is one step. The service routes each new task
to the version its request names, or to the ``default`` alias.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agent.store import metadata
from agent.trajectory import utcnow

versions = sa.Table(
    "model_versions",
    metadata,
    sa.Column("name", sa.String(256), primary_key=True),
    sa.Column("served_name", sa.String(256), nullable=False),
    sa.Column("base", sa.String(1024)),
    sa.Column("adapter", sa.String(1024)),
    sa.Column("state", sa.String(32), nullable=False),  # registered, candidate, active, retired, rejected
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("info", sa.JSON, nullable=False),
)
aliases = sa.Table(
    "model_aliases",
    metadata,
    sa.Column("alias", sa.String(64), primary_key=True),
    sa.Column("version", sa.String(256), sa.ForeignKey("model_versions.name"), nullable=False),
    sa.Column("previous", sa.String(256), sa.ForeignKey("model_versions.name")),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

DEFAULT_ALIAS = "default"


@dataclass(frozen=True)
class ModelVersion:
    name: str
    served_name: str
    base: str | None
    adapter: str | None
    state: str
    created_at: datetime
    info: dict[str, Any]


class RegistryError(LookupError):
    pass


class ModelRegistry:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def register(self, name: str, *, served_name: str | None = None, base: str | None = None,
                 adapter: str | None = None, state: str = "registered", info: dict[str, Any] | None = None) -> ModelVersion:  # fmt: skip
        version = ModelVersion(name, served_name or name, base, adapter, state, utcnow(), info or {})
        with self.engine.begin() as conn:
            if conn.execute(sa.select(versions.c.name).where(versions.c.name == name)).first():
                raise RegistryError(f"model version {name!r} exists; versions are immutable")
            conn.execute(sa.insert(versions).values(**version.__dict__))
        return version

    def versions(self) -> list[ModelVersion]:
        with self.engine.connect() as conn:
            return [
                ModelVersion(**r._mapping)
                for r in conn.execute(sa.select(versions).order_by(versions.c.created_at))
            ]

    def get(self, name: str) -> ModelVersion:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(versions).where(versions.c.name == name)).first()
        if row is None:
            raise RegistryError(f"no model version {name!r}")
        return ModelVersion(**row._mapping)

    def aliases(self) -> dict[str, str]:
        with self.engine.connect() as conn:
            return {r.alias: r.version for r in conn.execute(sa.select(aliases))}

    def resolve(self, name: str | None) -> ModelVersion | None:
        """A version by name or alias; None asks for the default (None when none is set)."""
        target = name or DEFAULT_ALIAS
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(aliases.c.version).where(aliases.c.alias == target)).first()
        if row is not None:
            return self.get(row.version)
        if name is None:
            return None
        return self.get(name)

    def set_alias(self, alias: str, version: str) -> None:
        self.get(version)
        with self.engine.begin() as conn:
            current = conn.execute(sa.select(aliases.c.version).where(aliases.c.alias == alias)).first()
            if current is None:
                conn.execute(
                    sa.insert(aliases).values(
                        alias=alias, version=version, previous=None, updated_at=utcnow()
                    )
                )
            elif current.version != version:
                conn.execute(sa.update(aliases).where(aliases.c.alias == alias)
                             .values(version=version, previous=current.version, updated_at=utcnow()))  # fmt: skip

    def rollback(self, alias: str = DEFAULT_ALIAS) -> str:
        """Point the alias back where it was before its last move; return that version."""
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(aliases).where(aliases.c.alias == alias)).first()
            if row is None or row.previous is None:
                raise RegistryError(f"alias {alias!r} has nothing to roll back to")
            conn.execute(sa.update(aliases).where(aliases.c.alias == alias)
                         .values(version=row.previous, previous=row.version, updated_at=utcnow()))  # fmt: skip
            return str(row.previous)
