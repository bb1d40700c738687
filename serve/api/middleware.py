"""The ASGI middleware in front of every route: the key check and the body limit.

Both decide from the request's headers, before a route reads a byte of its body. FastAPI reads and
parses a body before it solves a route's dependencies, so a key checked only by a dependency lets
anyone make the service read, parse and answer 422 to a body of any size. ``KeyCheck`` answers 401
first (the key is verified as ``serve.api.deps`` defines it), and 403 to a key without the admin scope
on an admin route; ``BodyLimit`` answers 413 from the
Content-Length, or, without one, as soon as the body streamed in passes the limit.

Starlette's own ``RequestBodyLimitMiddleware`` (FastAPI's ``max_body_size``) is not used: it looks at
the Content-Length only when the route reads the body or answers, so a route without a body runs
before its 413, and FastAPI mounts it outside the app's middleware, ahead of the key check.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import HTTPException, Request, status
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import OperationalError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve.api.auth import Scope as KeyScope
from serve.api.deps import authenticate, is_public
from serve.api.validation import store_unavailable


class KeyCheck:
    """Refuses a request without a valid key (401, or 403) before its route runs, except on public routes."""

    def __init__(self, app: ASGIApp, admin: Sequence[APIRoute] = ()) -> None:
        self.app = app
        self.admin = admin  # the routes only an admin key may use (``serve.api.deps.admin_routes``)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = _route_path(scope) if scope["type"] == "http" else ""
        if scope["type"] != "http" or is_public(scope["method"], path):
            await self.app(scope, receive, send)
            return
        try:
            key = await authenticate(Request(scope))  # no receive: nothing here can read the body
            if not key.allows(KeyScope.ADMIN) and any(
                scope["method"] in (route.methods or ()) and route.path_regex.match(path)
                for route in self.admin
            ):
                raise HTTPException(
                    status.HTTP_403_FORBIDDEN, f"this key lacks the {KeyScope.ADMIN.value} scope"
                )
        except HTTPException as exc:
            await JSONResponse({"detail": exc.detail}, exc.status_code, exc.headers)(scope, receive, send)
            return
        except OperationalError as exc:  # the key store did not answer: neither 401 nor 500
            response = await store_unavailable(Request(scope), exc)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The path the router matches: without the prefix a proxy mounts the service under."""
    path, root = str(scope["path"]), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(status.HTTP_413_CONTENT_TOO_LARGE, f"the request body is larger than {limit} bytes")


class BodyLimit:
    """Refuses a body over ``max_bytes`` with 413: from its Content-Length, or while it streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI passes an HTTPException from reading the body on to its handler.
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The server discards what the client still sends, so the client gets to read this answer.
        exc = BodyTooLarge(self.max_bytes)
        await JSONResponse({"detail": exc.detail}, exc.status_code)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:  # malformed (the server refuses those) or thousands of digits: counted as it comes
        return None
