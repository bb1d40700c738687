"""Shared route dependencies: the service state and API-key authorisation.

A key arrives as ``Authorization: Bearer KEY``, as ``X-API-Key``, or, for the viewer pages in a
browser, as the HttpOnly ``uis1_key`` cookie that ``POST /v1/session`` sets. A browser sends a
cookie with any request, including one forged by another site, so a request authenticated only
by the cookie may change state only when it also carries the ``X-UIS1-CSRF`` header: another site
cannot add a custom header without a CORS preflight, which this service refuses unless
``UIS1_CORS_ORIGINS`` trusts that site.

The key is checked before the route reads a byte of the body, by ``serve.api.middleware.KeyCheck``
(FastAPI parses a body before it solves dependencies): every route but ``PUBLIC_ROUTES``. The
dependencies below then only look at the key it found, for its scopes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import compile_path

from serve.api.auth import ApiKey, Scope
from serve.service import ServiceState

SESSION_COOKIE = "uis1_key"
CSRF_HEADER = "X-UIS1-CSRF"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# Routes that answer without a key: the probes, signing in (the key is in its body) and the viewer
# pages, which answer a sign-in form of their own. (method, path template); HEAD counts as GET.
PUBLIC_ROUTES = frozenset(
    {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("POST", "/v1/session"),
        ("GET", "/viewer"),
        ("GET", "/viewer/tasks/{task_id}"),
    }
)
_PUBLIC = [(method, compile_path(path)[0]) for method, path in PUBLIC_ROUTES]
_KEY_STATE = "api_key"  # where KeyCheck leaves the caller's key (request.state)

_bearer = HTTPBearer(auto_error=False, description="An API key (uis1 keys create).")
_header = APIKeyHeader(name="X-API-Key", auto_error=False)
_cookie = APIKeyCookie(
    name=SESSION_COOKIE, auto_error=False, description="Set by POST /v1/session for the viewer pages."
)


def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]


class Unauthorized(HTTPException):
    def __init__(self, detail: str) -> None:
        super().__init__(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def is_public(method: str, path: str) -> bool:
    method = "GET" if method == "HEAD" else method
    return any(method == m and pattern.match(path) for m, pattern in _PUBLIC)


async def authenticate(request: Request) -> ApiKey:
    """The caller's key from the request's headers alone (the body is never touched); raises 401 or 403."""
    key = await _authenticate(
        request, get_state(request), await _bearer(request), await _header(request), await _cookie(request)
    )
    setattr(request.state, _KEY_STATE, key)
    return key


async def _authenticate(
    request: Request,
    state: ServiceState,
    bearer: HTTPAuthorizationCredentials | None,
    header: str | None,
    cookie: str | None,
) -> ApiKey:
    """What a valid key is: the one definition, for the middleware and the dependencies."""
    token = bearer.credentials if bearer else header
    if not token and cookie:
        if request.method not in _SAFE_METHODS and request.headers.get(CSRF_HEADER) != "1":
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"a request authenticated by cookie needs the {CSRF_HEADER}: 1 header",
            )
        token = cookie
    if not token:
        raise Unauthorized("an API key is required")
    key = await asyncio.to_thread(state.keys.verify, token)
    if key is None:
        raise Unauthorized("invalid or revoked API key")
    return key


def require(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
    async def check(
        request: Request,
        state: StateDep,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        header: Annotated[str | None, Depends(_header)],
        cookie: Annotated[str | None, Depends(_cookie)],
    ) -> ApiKey:
        # KeyCheck found the key before the body was read; on a route it lets through without
        # one, the key is checked here.
        key = getattr(request.state, _KEY_STATE, None) or await _authenticate(
            request, state, bearer, header, cookie
        )
        if not key.allows(scope):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"this key lacks the {scope.value} scope")
        return key

    return check


async def optional_key(
    request: Request,
    state: StateDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header: Annotated[str | None, Depends(_header)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> ApiKey | None:
    """The caller's key, or None without a valid one (for pages that answer with a sign-in form)."""
    try:
        return await _authenticate(request, state, bearer, header, cookie)
    except Unauthorized:
        return None


OptionalKey = Annotated[ApiKey | None, Depends(optional_key)]
_require_admin = require(Scope.ADMIN)
AgentKey = Annotated[ApiKey, Depends(require(Scope.AGENT))]
AdminKey = Annotated[ApiKey, Depends(_require_admin)]


def admin_routes(routers: Iterable[APIRouter]) -> list[APIRoute]:
    """Every route that asks for the admin key (``AdminKey``, however deep in its dependencies):
    ``KeyCheck`` refuses other keys there before the body is read."""

    def calls(dependant: Dependant) -> Iterator[Any]:
        for dependency in dependant.dependencies:
            yield dependency.call
            yield from calls(dependency)

    return [
        route
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and any(call is _require_admin for call in calls(route.dependant))
    ]
