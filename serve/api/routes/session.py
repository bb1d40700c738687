"""``/v1/session``: exchange an API key for the HttpOnly cookie the viewer pages use, and sign out."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request, Response, status
from pydantic import BaseModel, Field

from serve.api.deps import CSRF_HEADER, SESSION_COOKIE, AgentKey, StateDep, Unauthorized
from serve.api.validation import StrictJsonRoute

router = APIRouter(prefix="/v1/session", tags=["session"], route_class=StrictJsonRoute)

SESSION_MAX_AGE_S = 12 * 3600


class SessionRequest(BaseModel):
    key: str = Field(min_length=1, max_length=200, description="An API key.")


class SessionResponse(BaseModel):
    key_id: str
    name: str
    scopes: list[str]


@router.post(
    "",
    response_model=SessionResponse,
    responses={
        401: {"description": "The key is not valid."},
        403: {"description": f"The {CSRF_HEADER} header is missing."},
    },
)
async def sign_in(
    body: SessionRequest,
    state: StateDep,
    request: Request,
    response: Response,
    csrf: Annotated[str | None, Header(alias=CSRF_HEADER, include_in_schema=False)] = None,
) -> SessionResponse:
    """Check a key and keep it in an HttpOnly, SameSite=Strict cookie for this site."""
    if csrf != "1":
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"signing in needs the {CSRF_HEADER}: 1 header")
    key = await asyncio.to_thread(state.keys.verify, body.key)
    if key is None:
        raise Unauthorized("invalid or revoked API key")
    response.set_cookie(
        SESSION_COOKIE,
        body.key,
        max_age=SESSION_MAX_AGE_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return SessionResponse(key_id=key.id, name=key.name, scopes=sorted(s.value for s in key.scopes))


@router.delete("", status_code=status.HTTP_204_NO_CONTENT)
async def sign_out(key: AgentKey) -> Response:
    """Remove the session cookie."""
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
