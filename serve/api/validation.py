"""Request bodies: JSON read strictly, and validation errors that always encode.

Python's JSON parser reads ``NaN``, ``Infinity`` and ``1e999`` as floats, and ``"\\ud800"`` (half of
a UTF-16 surrogate pair) as a string that no UTF-8 encoder takes; FastAPI's default 422 echoes the
input it refuses and then fails to encode it (a 500). Here a body holding either is refused while it
is parsed, with a 422 that names the field, and a validation error never carries the input: each
error is its type, where (``loc``) and a one-line message, in FastAPI's shape. A body of more values
than any request needs is refused before it is parsed.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from itertools import islice
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 300  # an error names the problem; it never echoes a whole field back
MAX_ERRORS = 5
# No request of this API comes near (a /v1/predict request holds about fifty values), and a 32 MB
# body of sixteen million numbers would hold the event loop for over half a second to parse and far
# longer to check. Commas and brackets are counted before parsing: at least one per value but the first.
MAX_VALUES = 10_000

Loc = tuple[str | int, ...]


class StrictJsonRoute(APIRoute):
    """A route whose JSON body may hold only finite numbers and well-formed text."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class InvalidBody(HTTPException):
    """A body refused while it is parsed; FastAPI passes an HTTPException from there on unchanged."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(status.HTTP_422_UNPROCESSABLE_CONTENT, errors)


def loads(body: bytes) -> Any:
    """The JSON document, or ``InvalidBody`` naming what is wrong and where."""
    if body.count(b",") + body.count(b"[") + body.count(b"{") > MAX_VALUES:
        message = f"more than {MAX_VALUES} commas and brackets: too many values for any request"
        raise InvalidBody([error(("body",), "too_many_values", message)])
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # also not UTF-8, too deep, an integer of 5000 digits
        raise InvalidBody([error(("body",), "json_invalid", f"not valid JSON: {exc}")]) from None
    problems = list(islice(_problems(data), MAX_ERRORS))
    if problems:
        raise InvalidBody(problems)
    return data


def _problems(data: Any) -> Iterator[dict[str, Any]]:
    """Non-finite numbers and text with unpaired surrogates, the shallowest first."""
    queue: deque[tuple[Loc, Any]] = deque([(("body",), data)])
    while queue:
        loc, value = queue.popleft()
        if isinstance(value, float) and not math.isfinite(value):
            name = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
            yield error(loc, "finite_number", f"{name} is not allowed: numbers must be finite")
        elif isinstance(value, str) and not _well_formed(value):
            yield error(loc, "string_unicode", _SURROGATE)
        elif isinstance(value, dict):
            for key, item in value.items():
                if not _well_formed(key):
                    yield error((*loc, key), "string_unicode", f"a key: {_SURROGATE}")
                queue.append(((*loc, key), item))
        elif isinstance(value, list):
            queue.extend(((*loc, index), item) for index, item in enumerate(value))


_SURROGATE = "text with an unpaired surrogate (half of a UTF-16 pair, e.g. \\ud800) is not allowed"


def _well_formed(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def error(loc: Loc, kind: str, message: str) -> dict[str, Any]:
    """One validation error as the API sends it: only text that encodes, and no input."""
    return {
        "type": _printable(kind),
        "loc": [part if isinstance(part, int) else _printable(str(part)) for part in loc],
        "msg": _printable(message),
    }


def _printable(text: str) -> str:
    """The text cut short, with surrogates written as escapes, so it always encodes."""
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text if _well_formed(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """The 422 for a request FastAPI could not validate: where and what, never the input."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = [error(tuple(e["loc"]), str(e["type"]), str(e["msg"])) for e in errors]
    return JSONResponse({"detail": detail}, status.HTTP_422_UNPROCESSABLE_CONTENT)


STORE_RETRY_AFTER_S = 2


async def store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The 503 for a database that did not answer (locked, restarting, unreachable), instead of a
    500: the failed statement was rolled back, and Retry-After says when to try again."""
    log.warning("the store did not answer on %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(
        {"detail": "the task store is not answering; retry shortly"},
        status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
    )
