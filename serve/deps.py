"""Shared route dependencies: the service state and API-key authorisation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from serve.auth import ApiKey, Scope
from serve.state import ServiceState

_bearer = HTTPBearer(auto_error=False, description="An API key (uis1 keys create).")
_header = APIKeyHeader(name="X-API-Key", auto_error=False)


def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]


def require(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
    async def check(
        state: StateDep,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        header: Annotated[str | None, Depends(_header)],
    ) -> ApiKey:
        token = bearer.credentials if bearer else header
        if not token:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API key is required",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
        key = await asyncio.to_thread(state.keys.verify, token)
        if key is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
        if not key.allows(scope):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"this key lacks the {scope.value} scope")
        return key

    return check


AgentKey = Annotated[ApiKey, Depends(require(Scope.AGENT))]
AdminKey = Annotated[ApiKey, Depends(require(Scope.ADMIN))]
