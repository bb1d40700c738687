"""Health, readiness, metrics and screenshot files."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Response, status
from fastapi.responses import FileResponse, JSONResponse
from prometheus_client import generate_latest

from agent.policy import Policy
from devices.pool import DevicePool
from serve.api.deps import AgentKey, StateDep
from serve.api.validation import StrictJsonRoute
from serve.models.swap.base import CHECK_KEY
from serve.ops import metrics
from serve.service import ServiceState

router = APIRouter(route_class=StrictJsonRoute)
PROMETHEUS_TEXT = "text/plain; version=0.0.4"


@router.get("/healthz", tags=["system"])
async def healthz() -> dict[str, str]:
    """The process is up (no key needed)."""
    return {"status": "ok"}


PROBE_TTL_S = 5.0  # readiness probes are reused this long: a burst of probes costs one check
PROBE_TIMEOUT_S = 2.0  # a dependency that does not answer in this time is not ready


@router.get("/readyz", tags=["system"], responses={503: {"description": "A dependency is not ready."}})
async def readyz(state: StateDep) -> JSONResponse:
    """Ready to run tasks: database, policy server and at least one device (no key needed).

    Answers within about two seconds whatever its dependencies do: each check is bounded and its
    result reused for a few seconds."""
    required = set(state.settings.readiness_checks)
    database, policy = await asyncio.gather(
        _probe(state, "database", lambda: asyncio.to_thread(_database_ok, state)),
        _probe(state, "policy", lambda: policy_answers(state.policy)),
    )
    checks = {"database": database, "policy": policy, "device": device_ready(state.pool)}
    ok = all(passed for name, passed in checks.items() if name in required)
    router = state.router  # images: "original" once the policy server is checked
    images = {"transport": router.prompt.image_transport, "why": router.image_note}
    serving = await _serving(state)
    return JSONResponse(
        {"ready": ok, "checks": checks, "required": sorted(required), "images": images, "serving": serving},
        status_code=200 if ok else 503,
    )


async def _serving(state: ServiceState) -> dict[str, Any] | None:
    """The version the default alias names and whether its weights were verified when swapped in
    (``agent.fingerprint``); None when no version is promoted or the registry does not answer."""
    if state.serving is not None and time.monotonic() - state.serving[0] < PROBE_TTL_S:
        return state.serving[1]

    def read() -> dict[str, Any] | None:
        version = state.registry.promoted()
        if version is None:
            return None
        check = version.info.get(CHECK_KEY)
        return {
            "version": version.name,
            "fingerprint": check
            if isinstance(check, dict)
            else {"verified": False, "why": "not checked by a swap"},
        }

    try:
        serving = await asyncio.wait_for(asyncio.to_thread(read), PROBE_TIMEOUT_S)
    except Exception:
        serving = None
    state.serving = (time.monotonic(), serving)
    return serving


async def _probe(state: ServiceState, name: str, check: Callable[[], Awaitable[bool]]) -> bool:
    now = time.monotonic()
    cached = state.probes.get(name)
    if cached is not None and now - cached[0] < PROBE_TTL_S:
        return cached[1]
    passed = await within(check(), PROBE_TIMEOUT_S)
    state.probes[name] = (time.monotonic(), passed)
    return passed


async def within(check: Awaitable[bool], timeout: float) -> bool:
    """A dependency check bounded in time: a timeout or a failure is False."""
    try:
        return bool(await asyncio.wait_for(check, timeout))
    except Exception:
        return False


def _database_ok(state: ServiceState) -> bool:
    with state.store.engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    return True


async def policy_answers(policy: Policy) -> bool:
    """Whether the policy server answers its health check (an in-process policy always does)."""
    health = getattr(policy, "health", None)
    return bool(await health()) if health is not None else True


def device_ready(pool: DevicePool) -> bool:
    return any(d.state.value == "device" for d in pool.devices.values())


@router.get(
    "/metrics", tags=["system"], response_class=Response, responses={200: {"content": {"text/plain": {}}}}
)
async def prometheus(state: StateDep, key: AgentKey) -> Response:
    counts: dict[str, int] = {}
    for device in state.pool.devices.values():
        counts[device.state.value] = counts.get(device.state.value, 0) + 1
    metrics.DEVICES.clear()
    for state_name, count in counts.items():
        metrics.DEVICES.labels(state=state_name).set(count)
    metrics.MODEL.info({"version": state.policy.model_version})
    return Response(generate_latest(metrics.REGISTRY), media_type=PROMETHEUS_TEXT)


@router.get(
    "/metrics/vllm",
    tags=["system"],
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}},
        404: {"description": "No vLLM backend."},
        502: {"description": "The vLLM server did not answer."},
    },
)
async def vllm_metrics(state: StateDep, key: AgentKey) -> Response:
    """The vLLM server's own metrics, relayed, so that its port never has to be reachable by a scraper."""
    if state.settings.policy_backend != "vllm":
        raise HTTPException(status.HTTP_404_NOT_FOUND, "the service does not use a vLLM server")
    policy = state.settings.policy
    headers = {"Authorization": f"Bearer {policy.api_key}"} if policy.api_key else {}
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=policy.connect_timeout_s)) as client:
            upstream = await client.get(policy.base_url.rstrip("/") + "/metrics", headers=headers)
            upstream.raise_for_status()
    except httpx.HTTPError as exc:
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY, f"vLLM metrics unavailable: {type(exc).__name__}"
        ) from exc
    return Response(upstream.content, media_type=PROMETHEUS_TEXT)


@router.get(
    "/v1/screenshots/{sha256}",
    tags=["trajectories"],
    response_class=FileResponse,
    responses={200: {"content": {"image/png": {}}}, 404: {"description": "Unknown or expired."}},
)
async def screenshot_file(sha256: str, state: StateDep, key: AgentKey) -> FileResponse:
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such screenshot")
    path = state.store.screenshots.path(sha256)
    if not await asyncio.to_thread(path.is_file):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such screenshot (or dropped by retention)")
    return FileResponse(path, media_type="image/png")
