"""``/v1/models``: model versions, aliases and history; registering, promoting and rolling back
need an admin key.

Promoting moves the ``default`` alias (new tasks go to that version, running ones stay on theirs),
marks the version promoted and the one it replaces retired; a rollback moves the alias back and
marks the rolled-back version rejected. Each change is recorded with the key that made it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from agent.jobs import LockHeld
from agent.registry import DEFAULT_ALIAS, ModelEvent, ModelVersion, RegistryError
from serve.api.deps import AdminKey, AgentKey, StateDep
from serve.api.validation import StrictJsonRoute
from serve.models.swap import SwapError

router = APIRouter(prefix="/v1/models", tags=["models"], route_class=StrictJsonRoute)

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,255}$"


class VersionResponse(BaseModel):
    name: str
    served_name: str
    kind: str
    base: str | None
    adapter: str | None
    parent: str | None
    state: str
    created_at: datetime
    info: dict[str, Any] = Field(description="Training config, data manifest, evaluations, gate decision.")


class EventResponse(BaseModel):
    version: str
    event: str
    actor: str
    at: datetime
    detail: dict[str, Any]


class VersionDetail(VersionResponse):
    events: list[EventResponse]


class ModelsResponse(BaseModel):
    versions: list[VersionResponse]
    aliases: dict[str, str]
    default: str | None


class RegisterRequest(BaseModel):
    name: str = Field(pattern=NAME)
    served_name: str | None = Field(
        None, pattern=NAME, description="The name vLLM serves it by (default: name)."
    )
    base: str | None = Field(None, max_length=1024)
    adapter: str | None = Field(None, max_length=1024)
    kind: Literal["base", "full", "adapter"] | None = None
    parent: str | None = Field(None, pattern=NAME)


class PromoteRequest(BaseModel):
    version: str = Field(pattern=NAME)
    alias: str = Field(DEFAULT_ALIAS, pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    force: bool = Field(False, description="Promote a rejected version anyway.")
    reason: str | None = Field(None, max_length=500)


class StageRequest(BaseModel):
    version: str = Field(pattern=NAME)


class RollbackRequest(BaseModel):
    alias: str = Field(DEFAULT_ALIAS, pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    reason: str | None = Field(None, max_length=500)


def _version(v: ModelVersion) -> VersionResponse:
    return VersionResponse(
        name=v.name,
        served_name=v.served_name,
        kind=v.kind,
        base=v.base,
        adapter=v.adapter,
        parent=v.parent,
        state=v.state,
        created_at=v.created_at,
        info=v.info,
    )


def _event(e: ModelEvent) -> EventResponse:
    return EventResponse(version=e.version, event=e.event, actor=e.actor, at=e.at, detail=e.detail)


@router.get("", response_model=ModelsResponse)
async def list_models(state: StateDep, key: AgentKey) -> ModelsResponse:
    versions = await asyncio.to_thread(state.registry.versions)
    aliases = await asyncio.to_thread(state.registry.aliases)
    return ModelsResponse(
        versions=[_version(v) for v in versions], aliases=aliases, default=aliases.get(DEFAULT_ALIAS)
    )


@router.post("", response_model=VersionResponse, status_code=status.HTTP_201_CREATED)
async def register_model(body: RegisterRequest, state: StateDep, key: AdminKey) -> VersionResponse:
    try:
        version = await asyncio.to_thread(
            state.registry.register,
            body.name,
            served_name=body.served_name,
            base=body.base,
            adapter=body.adapter,
            kind=body.kind,
            parent=body.parent,
            actor=f"key:{key.id}",
        )
    except RegistryError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return _version(version)


@router.get("/{name:path}", response_model=VersionDetail)
async def get_model(name: str, state: StateDep, key: AgentKey) -> VersionDetail:
    try:
        version = await asyncio.to_thread(state.registry.get, name)
    except RegistryError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    history = await asyncio.to_thread(state.registry.events, name)
    return VersionDetail(**_version(version).model_dump(), events=[_event(e) for e in history])


@router.post("/promote", response_model=ModelsResponse)
async def promote(body: PromoteRequest, state: StateDep, key: AdminKey) -> ModelsResponse:
    """Serve the version and make it the alias's target. For ``default`` with vLLM or the in-process
    engine this is the hot swap: load, canary, flip; a failed canary answers 409 and the old version
    keeps serving."""
    try:
        await asyncio.to_thread(state.registry.get, body.version)
    except RegistryError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    try:
        await state.router.promote(
            body.version, alias=body.alias, actor=f"key:{key.id}", force=body.force, reason=body.reason
        )
    except (RegistryError, SwapError, LockHeld) as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    state.serving = None  # /readyz reads the serving version afresh
    return await list_models(state, key)


@router.post("/stage", response_model=ModelsResponse)
async def stage(body: StageRequest, state: StateDep, key: AdminKey) -> ModelsResponse:
    """Load and canary a version beside the one serving, without moving the default alias; its
    promotion (within ``UIS1_SWAP__STAGE_TTL_S``) is then the alias flip alone. A failed canary
    answers 409 and rejects the version; a version that would be swapped in place answers 409."""
    try:
        await asyncio.to_thread(state.registry.get, body.version)
    except RegistryError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    try:
        await state.router.stage(body.version, actor=f"key:{key.id}")
    except (RegistryError, SwapError, LockHeld) as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return await list_models(state, key)


@router.post("/rollback", response_model=ModelsResponse)
async def rollback(body: RollbackRequest, state: StateDep, key: AdminKey) -> ModelsResponse:
    """Serve the version the alias pointed at before; the rolled-back version is rejected."""
    try:
        await state.router.rollback(alias=body.alias, actor=f"key:{key.id}", reason=body.reason)
    except (RegistryError, SwapError, LockHeld) as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    state.serving = None
    return await list_models(state, key)
