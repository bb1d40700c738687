"""The trajectory viewer: plain HTML pages with a little JavaScript, no build step.

``/viewer`` lists recent tasks; ``/viewer/tasks/{id}`` follows a running task live (server-sent
events) or replays a finished one: each step's screenshot with the executed action drawn on it,
the thought, timings and model version, plus feedback and takeover controls. The pages call the
same JSON API as any client, authenticated by the session cookie (``/v1/session``). Without a
valid key a page answers 401 with a sign-in form; a link may carry the key in its fragment
(``#key=...``), which the browser keeps to itself, so keys never land in server or proxy logs.
Scripts and styles run under a per-response nonce (Content-Security-Policy), nothing else.
"""

from __future__ import annotations

import html
import re
import secrets
from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse

from serve.api.deps import OptionalKey
from serve.api.validation import StrictJsonRoute

router = APIRouter(prefix="/viewer", include_in_schema=False, route_class=StrictJsonRoute)

TASK_ID = r"^[A-Za-z0-9_-]{1,64}$"


@cache
def _asset(name: str) -> str:
    return resources.files("serve.api.viewer").joinpath(name).read_text(encoding="utf-8")


def _page(name: str, status_code: int = 200, **values: str) -> HTMLResponse:
    nonce = secrets.token_urlsafe(18)
    body = _asset(name)
    fills = {"style": _asset("viewer.css"), "common": _asset("common.js"), "nonce": nonce}
    fills.update({k: html.escape(v, quote=True) for k, v in values.items()})
    for key, value in fills.items():
        body = body.replace("{{" + key + "}}", value)
    csp = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Security-Policy": csp,
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    return HTMLResponse(body, status_code=status_code, headers=headers)


def _sign_in() -> HTMLResponse:
    return _page("login.html", status_code=401)


@router.get("", response_class=HTMLResponse)
async def task_list(key: OptionalKey) -> HTMLResponse:
    if key is None:
        return _sign_in()
    return _page("tasks.html", key_name=key.name)


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
async def task_page(task_id: str, key: OptionalKey) -> HTMLResponse:
    if key is None:
        return _sign_in()
    if not re.fullmatch(TASK_ID, task_id):
        raise HTTPException(404, "no such task")
    return _page("task.html", task_id=task_id)
