"""The model registry: immutable model versions, their lineage and history, and movable aliases.

A version is a full checkpoint, or a base plus an adapter, under the name vLLM serves it by
(``served_name``), optionally on an engine of its own (``endpoint``, for blue/green). Its weights
and lineage never change; evaluation results are added to its ``info`` as they are measured.

States: ``candidate`` (registered, not serving clients), ``promoted`` (the ``default`` alias points
at it), ``retired`` (was promoted, replaced by a newer one; a rollback target), ``rejected`` (failed
the gate or a canary, or rolled back; promoting it again needs ``force``). Aliases: ``default``
(what new tasks get) and ``canary``; moving one remembers where it pointed, so a rollback is one
step. Every change is an event with its actor (an API key, ``scheduler``, ``cli:USER``) and detail.

A version is served with the system prompt it was trained with: registering one reads the
``system_prompt.txt`` saved beside its weights (its adapter's, else its checkpoint's) into
``info["system_prompt"]``; a version without one is served with the service's prompt (UI-S1's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from agent.checkpoint import saved_system_prompt
from agent.prompt import PromptSettings
from agent.store import metadata
from agent.trajectory import utcnow

versions = sa.Table(
    "model_versions",
    metadata,
    sa.Column("name", sa.String(256), primary_key=True),
    sa.Column("served_name", sa.String(256), nullable=False),
    sa.Column("base", sa.String(1024)),
    sa.Column("adapter", sa.String(1024)),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("info", sa.JSON, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False, server_default="full"),
    sa.Column("parent", sa.String(256)),
    sa.Column("endpoint", sa.String(1024)),
    sa.Column("updated_at", sa.DateTime(timezone=True)),
)
aliases = sa.Table(
    "model_aliases",
    metadata,
    sa.Column("alias", sa.String(64), primary_key=True),
    sa.Column("version", sa.String(256), sa.ForeignKey("model_versions.name"), nullable=False),
    sa.Column("previous", sa.String(256), sa.ForeignKey("model_versions.name")),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
events = sa.Table(
    "model_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("version", sa.String(256), nullable=False, index=True),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("actor", sa.String(256), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("detail", sa.JSON, nullable=False),
)

DEFAULT_ALIAS = "default"
CANARY_ALIAS = "canary"


class State(StrEnum):
    CANDIDATE = "candidate"
    PROMOTED = "promoted"
    RETIRED = "retired"
    REJECTED = "rejected"


class Kind(StrEnum):
    BASE = "base"  # a model as published (e.g. UI-S1-7B), registered by hand
    FULL = "full"  # a full fine-tuned checkpoint
    ADAPTER = "adapter"  # a LoRA adapter over ``base``


@dataclass(frozen=True)
class ModelVersion:
    name: str
    served_name: str
    base: str | None
    adapter: str | None
    state: str
    created_at: datetime
    info: dict[str, Any]
    kind: str = Kind.FULL.value
    parent: str | None = None
    endpoint: str | None = None
    updated_at: datetime | None = None

    @property
    def weights(self) -> str | None:
        """The directory vLLM loads: the adapter for an adapter, else the checkpoint."""
        return self.adapter if self.kind == Kind.ADAPTER else self.base

    @property
    def system_prompt(self) -> str | None:
        """The system prompt the version was trained with (None: the service's own)."""
        text = self.info.get("system_prompt")
        return text if isinstance(text, str) else None

    def prompt_of(self, service: PromptSettings) -> PromptSettings:
        """The prompt to ask this version with: the service's, with the version's system prompt."""
        text = self.system_prompt
        return service if text is None else dataclasses.replace(service, system_prompt=text)


@dataclass(frozen=True)
class ModelEvent:
    id: int
    version: str
    event: str
    actor: str
    at: datetime
    detail: dict[str, Any] = field(default_factory=dict)


class RegistryError(LookupError):
    pass


class ModelRegistry:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    # -- versions -----------------------------------------------------------------------------------
    def register(
        self,
        name: str,
        *,
        served_name: str | None = None,
        base: str | None = None,
        adapter: str | None = None,
        kind: str | None = None,
        parent: str | None = None,
        endpoint: str | None = None,
        state: str = State.CANDIDATE,
        info: dict[str, Any] | None = None,
        actor: str = "system",
    ) -> ModelVersion:
        kind = Kind(kind or (Kind.ADAPTER if adapter else Kind.FULL)).value
        if kind == Kind.ADAPTER and not (adapter and base):
            raise RegistryError("an adapter version needs both its base and its adapter")
        info = dict(info or {})
        if "system_prompt" not in info and (text := saved_system_prompt(base, adapter)) is not None:
            info["system_prompt"] = text
        now = utcnow()
        version = ModelVersion(
            name,
            served_name or name,
            base,
            adapter,
            State(state).value,
            now,
            info,
            kind,
            parent,
            endpoint,
            now,
        )
        with self.engine.begin() as conn:
            if conn.execute(sa.select(versions.c.name).where(versions.c.name == name)).first():
                raise RegistryError(f"model version {name!r} exists; versions are immutable")
            if (
                parent is not None
                and not conn.execute(sa.select(versions.c.name).where(versions.c.name == parent)).first()
            ):
                raise RegistryError(f"parent version {parent!r} is not registered")
            conn.execute(sa.insert(versions).values(**version.__dict__))
            self._event(conn, name, "registered", actor, {"kind": kind, "parent": parent})
        return version

    def versions(self, state: str | None = None) -> list[ModelVersion]:
        stmt = sa.select(versions).order_by(versions.c.created_at, versions.c.name)
        if state is not None:
            stmt = stmt.where(versions.c.state == state)
        with self.engine.connect() as conn:
            return [ModelVersion(**r._mapping) for r in conn.execute(stmt)]

    def get(self, name: str) -> ModelVersion:
        with self.engine.connect() as conn:
            return self._get(conn, name)

    @staticmethod
    def _get(conn: sa.Connection, name: str) -> ModelVersion:
        row = conn.execute(sa.select(versions).where(versions.c.name == name)).first()
        if row is None:
            raise RegistryError(f"no model version {name!r}")
        return ModelVersion(**row._mapping)

    def annotate(self, name: str, key: str, value: Any, *, actor: str = "system") -> ModelVersion:
        """Add a measured fact to the version's ``info`` (evaluations, canary results, the gate)."""
        with self.engine.begin() as conn:
            version = self._get(conn, name)
            info = {**version.info, key: value}
            conn.execute(
                sa.update(versions).where(versions.c.name == name).values(info=info, updated_at=utcnow())
            )
            self._event(conn, name, f"annotated:{key}"[:32], actor, {})
            return self._get(conn, name)

    def set_endpoint(self, name: str, endpoint: str | None, *, actor: str = "system") -> None:
        """Where the version is served (a blue/green engine's URL; None: the shared policy server)."""
        with self.engine.begin() as conn:
            self._get(conn, name)
            conn.execute(
                sa.update(versions)
                .where(versions.c.name == name)
                .values(endpoint=endpoint, updated_at=utcnow())
            )
            self._event(conn, name, "endpoint", actor, {"endpoint": endpoint})

    # -- aliases ------------------------------------------------------------------------------------
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

    def promoted(self) -> ModelVersion | None:
        return self.resolve(None)

    def previous(self, alias: str = DEFAULT_ALIAS) -> str | None:
        """Where ``alias`` pointed before its last move (what a rollback restores)."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(aliases.c.previous).where(aliases.c.alias == alias)).first()
        return None if row is None or row.previous is None else str(row.previous)

    def set_alias(self, alias: str, version: str, *, actor: str = "system") -> str | None:
        """Point ``alias`` at ``version`` (no state change); returns where it pointed before."""
        with self.engine.begin() as conn:
            self._get(conn, version)
            return self._move(conn, alias, version, actor)

    def _move(self, conn: sa.Connection, alias: str, version: str, actor: str) -> str | None:
        current = conn.execute(sa.select(aliases).where(aliases.c.alias == alias).with_for_update()).first()
        if current is None:
            conn.execute(
                sa.insert(aliases).values(alias=alias, version=version, previous=None, updated_at=utcnow())
            )
        elif current.version != version:
            conn.execute(
                sa.update(aliases)
                .where(aliases.c.alias == alias)
                .values(version=version, previous=current.version, updated_at=utcnow())
            )
        else:
            return str(current.previous) if current.previous else None
        self._event(
            conn, version, f"alias:{alias}"[:32], actor, {"previous": current.version if current else None}
        )
        return str(current.version) if current is not None else None

    # -- state changes ------------------------------------------------------------------------------
    def promote(
        self,
        name: str,
        *,
        actor: str,
        alias: str = DEFAULT_ALIAS,
        force: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> str | None:
        """Point ``alias`` at ``name``; for ``default`` the version becomes promoted and the one it
        replaces retired. Returns the version the alias pointed at before."""
        with self.engine.begin() as conn:
            version = self._get(conn, name)
            if version.state == State.REJECTED and not force:
                raise RegistryError(
                    f"{name} was rejected ({self._last_reason(conn, name)}); promote with force"
                )
            previous = self._move(conn, alias, name, actor)
            if alias == DEFAULT_ALIAS:
                self._state(
                    conn, name, State.PROMOTED, "promoted", actor, {**(detail or {}), "previous": previous}
                )
                if previous and previous != name:
                    self._state(conn, previous, State.RETIRED, "retired", actor, {"replaced_by": name})
            return previous

    def reject(self, name: str, *, actor: str, detail: dict[str, Any] | None = None) -> None:
        with self.engine.begin() as conn:
            self._get(conn, name)
            serving = conn.execute(
                sa.select(aliases.c.alias).where(aliases.c.version == name, aliases.c.alias == DEFAULT_ALIAS)
            ).first()
            if serving is not None:
                raise RegistryError(f"{name} is the default version: roll it back instead")
            self._state(conn, name, State.REJECTED, "rejected", actor, detail or {})

    def rollback(
        self, alias: str = DEFAULT_ALIAS, *, actor: str = "system", detail: dict[str, Any] | None = None
    ) -> str:
        """Point the alias back where it was before its last move; return that version. For
        ``default``, the version rolled back from is rejected and the restored one promoted."""
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(aliases).where(aliases.c.alias == alias).with_for_update()).first()
            if row is None or row.previous is None:
                raise RegistryError(f"alias {alias!r} has nothing to roll back to")
            conn.execute(
                sa.update(aliases)
                .where(aliases.c.alias == alias)
                .values(version=row.previous, previous=row.version, updated_at=utcnow())
            )
            if alias == DEFAULT_ALIAS:
                self._state(
                    conn,
                    row.version,
                    State.REJECTED,
                    "rolled_back",
                    actor,
                    {**(detail or {}), "restored": row.previous},
                )
                self._state(
                    conn, row.previous, State.PROMOTED, "restored", actor, {"rolled_back": row.version}
                )
            return str(row.previous)

    def _state(
        self, conn: sa.Connection, name: str, state: State, event: str, actor: str, detail: dict[str, Any]
    ) -> None:
        conn.execute(
            sa.update(versions).where(versions.c.name == name).values(state=state.value, updated_at=utcnow())
        )
        self._event(conn, name, event, actor, detail)

    # -- history ------------------------------------------------------------------------------------
    @staticmethod
    def _event(conn: sa.Connection, version: str, event: str, actor: str, detail: dict[str, Any]) -> None:
        conn.execute(
            sa.insert(events).values(
                version=version, event=event, actor=actor[:256], at=utcnow(), detail=detail
            )
        )

    @staticmethod
    def _last_reason(conn: sa.Connection, name: str) -> str:
        row = conn.execute(
            sa.select(events.c.event, events.c.detail)
            .where(events.c.version == name)
            .order_by(events.c.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return "no reason recorded"
        reason = (row.detail or {}).get("reason")
        return f"{row.event}: {reason}" if reason else str(row.event)

    def events(self, version: str | None = None, limit: int = 100) -> list[ModelEvent]:
        stmt = sa.select(events).order_by(events.c.id.desc()).limit(limit)
        if version is not None:
            stmt = stmt.where(events.c.version == version)
        with self.engine.connect() as conn:
            return [ModelEvent(**r._mapping) for r in conn.execute(stmt)]
