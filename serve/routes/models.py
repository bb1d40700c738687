"""``/v1/models``: model versions and aliases; registering, swapping and rolling back need admin.

Swapping moves the ``default`` alias (new tasks go to that version); loading the weights into
vLLM is the hot-swap controller's work and comes with it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from agent.registry import DEFAULT_ALIAS, RegistryError
from serve.deps import AdminKey, AgentKey, StateDep

router = APIRouter(prefix="/v1/models", tags=["models"])

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,255}$"


class VersionResponse(BaseModel):
    name: str
    served_name: str
    base: str | None
    adapter: str | None
    state: str
    created_at: datetime


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


class SwapRequest(BaseModel):
    version: str = Field(pattern=NAME)
    alias: str = Field(DEFAULT_ALIAS, pattern=r"^[a-z][a-z0-9_-]{0,63}$")


class RollbackRequest(BaseModel):
    alias: str = Field(DEFAULT_ALIAS, pattern=r"^[a-z][a-z0-9_-]{0,63}$")


def _version(v) -> VersionResponse:  # type: ignore[no-untyped-def]
    return VersionResponse(name=v.name, served_name=v.served_name, base=v.base, adapter=v.adapter, state=v.state,
                           created_at=v.created_at)  # fmt: skip


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
        version = await asyncio.to_thread(state.registry.register, body.name, served_name=body.served_name,
                                          base=body.base, adapter=body.adapter)  # fmt: skip
    except RegistryError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return _version(version)


@router.post("/swap", response_model=ModelsResponse)
async def swap(body: SwapRequest, state: StateDep, key: AdminKey) -> ModelsResponse:
    try:
        await asyncio.to_thread(state.registry.set_alias, body.alias, body.version)
    except RegistryError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    return await list_models(state, key)


@router.post("/rollback", response_model=ModelsResponse)
async def rollback(body: RollbackRequest, state: StateDep, key: AdminKey) -> ModelsResponse:
    try:
        await asyncio.to_thread(state.registry.rollback, body.alias)
    except RegistryError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return await list_models(state, key)
