"""``/v1/predict``: one stateless step for clients that drive their own devices.

The client sends the goal, the screenshots so far (the last one is the current screen) and the
policy's previous responses; the answer is the raw response, the action in the resized image's
pixels and in the current screenshot's own pixels. Uploads are checked before anything decodes
them fully: size, type (PNG, JPEG, WebP), pixel count of each and of all together. Decoding and
resizing run in a worker thread: a 40-megapixel PNG takes a CPU a good part of a second, which
the event loop (every other request) must not wait for.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, status
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, Field

from agent.execution import to_device_action
from agent.geometry import Size
from agent.policy import PolicyError, PolicyRejected, SamplingSettings
from agent.prompt import PromptSettings, Screenshot, Turn, build_conversation, current_geometry
from serve.api.deps import AgentKey, StateDep
from serve.api.validation import StrictJsonRoute
from serve.models.routing import UnknownModel
from serve.settings import ServeSettings

router = APIRouter(prefix="/v1", tags=["predict"], route_class=StrictJsonRoute)

MAX_SCREENSHOTS = 20
MAX_PIXELS = 40_000_000  # a 4K-by-10K screen; anything larger is not a phone screenshot
# A UI-S1 response is a few hundred tokens (a couple of thousand characters); 16k leaves room to spare.
MAX_RESPONSE_CHARS = 16_000
ALLOWED_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}


class PredictRequest(BaseModel):
    goal: str = Field(min_length=1, max_length=2000)
    screenshots: list[str] = Field(
        min_length=1,
        max_length=MAX_SCREENSHOTS,
        description="Base64 PNG/JPEG/WebP images, oldest first; the last is the current screen.",
    )
    history: list[Annotated[str, Field(max_length=MAX_RESPONSE_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_SCREENSHOTS - 1,
        description="The policy's previous raw responses, one per earlier screenshot.",
    )
    model: str | None = Field(
        None, max_length=256, description="A registry version or alias (unset: the default)."
    )
    sampling: SamplingSettings | None = None


class PredictResponse(BaseModel):
    raw: str
    action: dict[str, Any] | None = Field(
        None, description="In pixels of the resized screenshot the model saw."
    )
    device_action: dict[str, Any] | None = Field(None, description="In pixels of the current screenshot.")
    parse_error: str | None = None
    model_version: str
    resized: tuple[int, int]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float


def _probe(index: int, data: str, max_bytes: int) -> Screenshot:
    """The screenshot's bytes, type and size, from its header alone (nothing is decoded yet)."""
    if len(data) > max_bytes * 4 // 3 + 4:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE, f"screenshot {index} is larger than {max_bytes} bytes"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"screenshot {index} is not valid base64"
        ) from None
    try:
        with Image.open(io.BytesIO(raw)) as probe:
            fmt, size = probe.format, probe.size
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"screenshot {index} is not a readable image"
        ) from None
    if fmt is None or fmt not in ALLOWED_FORMATS:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"screenshot {index} is {fmt}; send PNG, JPEG or WebP"
        )
    if size[0] * size[1] > MAX_PIXELS:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE, f"screenshot {index} has more than {MAX_PIXELS} pixels"
        )
    return Screenshot(raw, Size(*size), mime=ALLOWED_FORMATS[fmt])


def _load(index: int, shot: Screenshot) -> None:
    """Decode the whole image: a truncated or corrupt file fails here, before the policy sees it."""
    try:
        with Image.open(io.BytesIO(shot.data)) as image:
            image.load()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"screenshot {index} is not a readable image"
        ) from None


def _conversation(body: PredictRequest, settings: ServeSettings, prompt: PromptSettings) -> list[Turn]:
    """The checked screenshots in the prompt (CPU work: run in a thread)."""
    shots = [_probe(i, s, settings.max_upload_bytes) for i, s in enumerate(body.screenshots)]
    pixels = sum(s.size.width * s.size.height for s in shots)
    if pixels > settings.max_predict_pixels:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"the screenshots hold {pixels} pixels in all, more than the {settings.max_predict_pixels} "
            "one request may send; send fewer or smaller ones",
        )
    for index, shot in enumerate(shots):
        _load(index, shot)
    return build_conversation(body.goal, shots, body.history, prompt)


@router.post(
    "/predict",
    response_model=PredictResponse,
    responses={
        400: {"description": "History that does not fit the screenshots."},
        413: {"description": "A screenshot, or all of them, too large (bytes or pixels)."},
        415: {"description": "Not PNG, JPEG or WebP."},
        422: {"description": "Not base64, not a readable image, or an unknown model."},
        502: {"description": "The policy server failed."},
    },
)
async def predict(body: PredictRequest, state: StateDep, key: AgentKey) -> PredictResponse:
    if len(body.history) != len(body.screenshots) - 1:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "send one previous response per earlier screenshot")
    try:
        route = await asyncio.to_thread(state.router.route, body.model)
    except UnknownModel as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    turns = await asyncio.to_thread(_conversation, body, state.settings, route.prompt)
    try:
        result = await state.router.policy_for(route).predict(
            turns, sampling=body.sampling, model=route.served_name
        )
    except PolicyRejected as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    except PolicyError as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, str(exc)) from None
    geometry = current_geometry(turns)
    action = result.parsed.action
    error = result.parsed.error
    return PredictResponse(
        raw=result.raw,
        action=action.to_dict() if action else None,
        device_action=to_device_action(action, geometry).to_dict() if action else None,
        parse_error=f"{error.reason.value}: {error.detail}" if error else None,
        model_version=route.version or result.model_version,
        resized=(geometry.resized.width, geometry.resized.height),
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        latency_s=result.latency_s,
    )
