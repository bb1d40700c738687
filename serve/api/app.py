"""The FastAPI application: routes over the runner, the store, the pool and the policy.

``create_app(settings)`` starts the service's parts in its lifespan (``serve.service``: store, keys,
device pool, policy, runner, swap, scheduler) and stops them on shutdown; here are the HTTP layers
around them: the key check before any body is read, the body limit, CORS, request counting, and
the routes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from agent.policy import Policy
from devices.pool import DevicePool
from serve.api.deps import AgentKey, admin_routes
from serve.api.middleware import BodyLimit, KeyCheck
from serve.api.routes import devices, jobs, models, predict, session, system, tasks, trajectories, viewer
from serve.api.validation import store_unavailable, validation_error
from serve.ops import metrics
from serve.service import ServiceState
from serve.settings import ServeSettings

log = logging.getLogger(__name__)


ROUTERS = (
    system.router,
    tasks.router,
    devices.router,
    trajectories.router,
    predict.router,
    models.router,
    jobs.router,
    session.router,
    viewer.router,
)


def create_app(settings: ServeSettings | None = None, *, policy: Policy | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    app = FastAPI(
        title="UI-S1 Agent Service",
        version="0.1.0",
        description="Phone tasks run by the UI-S1 policy on Android devices. Every route but /healthz and "
        "/readyz needs an API key (Authorization: Bearer KEY, or X-API-Key).",
        lifespan=_lifespan(settings, policy),
        # The schema is served behind a key like every other route (see below); no open docs pages.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        exception_handlers={RequestValidationError: validation_error, OperationalError: store_unavailable},
    )
    # Outermost last: the request count, CORS (preflights carry no key), the key, the body limit.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(KeyCheck, admin=admin_routes(ROUTERS))
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )
    app.middleware("http")(_count_requests)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(key: AgentKey) -> JSONResponse:
        return JSONResponse(app.openapi())

    for router in ROUTERS:
        app.include_router(router)
    return app


def _lifespan(
    settings: ServeSettings, policy: Policy | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the service's parts (``ServiceState``) before the first request; stop them after the last."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await ServiceState.start(settings, policy)
        app.state.service = state
        log.info(
            "serving with policy %s on %d device(s)", state.policy.model_version, len(state.pool.devices)
        )
        await _say_what_is_missing(settings, state.policy, state.pool)
        try:
            yield
        finally:
            await state.close()

    return lifespan


async def _count_requests(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Count and log each request by route and status; an unhandled error is a logged 500."""
    try:
        response = await call_next(request)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        metrics.HTTP_REQUESTS.labels(route=_route(request), status="500").inc()
        return JSONResponse({"detail": "internal error"}, status_code=500)
    metrics.HTTP_REQUESTS.labels(route=_route(request), status=str(response.status_code)).inc()
    log.info(
        "request", extra={"method": request.method, "path": request.url.path, "status": response.status_code}
    )
    return response


def _route(request: Request) -> str:
    route = request.scope.get("route")
    return getattr(route, "path", "unmatched")


async def _say_what_is_missing(settings: ServeSettings, policy: Policy, pool: DevicePool) -> None:
    """At start, a warning for each dependency that does not answer (the service still starts:
    tasks wait in the queue, and /readyz says the same)."""
    if not await system.within(system.policy_answers(policy), 3.0):
        log.warning(
            "the policy server at %s does not answer: tasks will fail until it does (UIS1_POLICY__BASE_URL)",
            settings.policy.base_url,
        )
    if pool.unreachable:
        log.warning("no adb server answers at %s (UIS1_ADB_SERVERS)", ", ".join(sorted(pool.unreachable)))
    if not system.device_ready(pool):
        log.warning("no device is ready: tasks wait in the queue until one is (uis1 devices list)")
