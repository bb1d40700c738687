"""The FastAPI application: routes over the runner, the store, the pool and the policy.

``create_app(settings)`` builds everything in the lifespan: the store (migrated), the API keys,
the device pool (discovered, health-checked), the policy (vLLM by default) and the task runner,
which resumes queued tasks. On shutdown the runner gets its grace period.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from agent.checkpoint import checkpoint_system_prompt
from agent.jobs import Job, JobStore
from agent.policy import Policy
from agent.prompt import PromptSettings
from agent.registry import ModelRegistry
from agent.store import TrajectoryStore
from devices.adb import DriverSettings
from devices.pool import DevicePool, PoolSettings
from serve import metrics
from serve.auth import KeyStore, sync_keys_file
from serve.cluster import Cluster
from serve.deps import AgentKey
from serve.middleware import BodyLimit, KeyCheck
from serve.routes import devices, jobs, models, predict, session, system, tasks, trajectories, viewer
from serve.runner import RunnerSettings, TaskRunner
from serve.scheduler import Scheduler
from serve.settings import ServeSettings
from serve.state import ServiceState
from serve.swap import HotSwapController, LocalSwapController, SwapController
from serve.validation import validation_error

log = logging.getLogger(__name__)


def make_policy(settings: ServeSettings, prompt: PromptSettings, registry: ModelRegistry) -> Policy:
    if settings.policy_backend == "local":
        if settings.local_model_dir is None:
            raise ValueError("policy_backend=local needs UIS1_LOCAL_MODEL_DIR")
        from agent.local_policy import LocalModels, LocalPolicy

        return LocalModels(LocalPolicy(settings.local_model_dir, prompt=prompt))
    from serve.routing import RoutedPolicy

    return RoutedPolicy(settings.policy, registry, prompt=prompt, on_retry=metrics.POLICY_RETRIES.inc)


def create_app(settings: ServeSettings | None = None, *, policy: Policy | None = None) -> FastAPI:
    settings = settings or ServeSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
        store.migrate()
        keys = KeyStore(store.engine)
        keys.migrate()
        if settings.api_keys_file is not None:
            active, revoked = sync_keys_file(keys, settings.api_keys_file)
            log.info("keys file %s: %d key(s) active, %d revoked", settings.api_keys_file, active, revoked)
        pool = DevicePool(
            PoolSettings(
                servers=settings.adb_servers, driver=DriverSettings(capture=settings.screenshot_capture)
            )
        )
        await pool.start()
        prompt = settings.prompt_settings()
        if policy is None and settings.policy_backend == "local" and settings.local_model_dir is not None:
            # a checkpoint in process is served with the system prompt it was trained with
            prompt = dataclasses.replace(
                prompt, system_prompt=checkpoint_system_prompt(settings.local_model_dir)
            )
        registry = ModelRegistry(store.engine)
        chosen = policy or make_policy(settings, prompt, registry)
        cluster = Cluster(store.engine, settings.replica_id, settings.device_lease_ttl_s)
        runner = TaskRunner(
            store,
            pool,
            chosen,
            RunnerSettings(
                max_queue=settings.max_queue,
                grace_s=settings.shutdown_grace_s,
                episode=settings.episode,
                cluster_lease_ttl_s=settings.device_lease_ttl_s,
                approval=settings.approval,
            ),
            prompt=prompt,
            registry=registry,
            cluster=cluster,
        )
        await runner.start()
        jobs = JobStore(store.engine)
        swap = swap_controller(settings, store, registry, chosen, prompt, given=policy is not None)
        runner.versions.swap = swap
        scheduler = Scheduler(jobs, settings.scheduler, on_job_end=_after_job(swap))
        background = []
        if swap is not None and settings.swap.auto_promote:
            background.append(asyncio.create_task(swap.watch(), name="promotion-watcher"))
        if settings.scheduler.enabled:
            background.append(asyncio.create_task(scheduler.run(), name="retrain-scheduler"))
        app.state.service = ServiceState(
            settings, store, keys, pool, chosen, runner, registry, jobs, scheduler, swap
        )
        log.info("serving with policy %s on %d device(s)", chosen.model_version, len(pool.devices))
        await _say_what_is_missing(settings, chosen, pool)
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await scheduler.aclose()
            if swap is not None:
                await swap.aclose()
            await runner.shutdown()
            await pool.stop()
            await chosen.aclose()
            store.engine.dispose()

    app = FastAPI(
        title="UI-S1 Agent Service",
        version="0.1.0",
        description="Phone tasks run by the UI-S1 policy on Android devices. Every route but /healthz and "
        "/readyz needs an API key (Authorization: Bearer KEY, or X-API-Key).",
        lifespan=lifespan,
        # The schema is served behind a key like every other route (see below); no open docs pages.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        exception_handlers={RequestValidationError: validation_error},
    )
    # Outermost last: the request count, CORS (preflights carry no key), the key, the body limit.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(KeyCheck)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )

    @app.middleware("http")
    async def count_requests(request: Request, call_next):  # type: ignore[no-untyped-def]
        try:
            response = await call_next(request)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.url.path)
            metrics.HTTP_REQUESTS.labels(route=_route(request), status="500").inc()
            return JSONResponse({"detail": "internal error"}, status_code=500)
        metrics.HTTP_REQUESTS.labels(route=_route(request), status=str(response.status_code)).inc()
        log.info(
            "request",
            extra={"method": request.method, "path": request.url.path, "status": response.status_code},
        )
        return response

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(key: AgentKey) -> JSONResponse:
        return JSONResponse(app.openapi())

    app.include_router(system.router)
    app.include_router(tasks.router)
    app.include_router(devices.router)
    app.include_router(trajectories.router)
    app.include_router(predict.router)
    app.include_router(models.router)
    app.include_router(jobs.router)
    app.include_router(session.router)
    app.include_router(viewer.router)
    return app


def swap_controller(
    settings: ServeSettings,
    store: TrajectoryStore,
    registry: ModelRegistry,
    policy: Policy,
    prompt: PromptSettings,
    *,
    given: bool,
) -> SwapController | None:
    """Where hot swaps go: into the in-process engine serving (``LocalModels``), else into the vLLM
    the service serves from; none for another policy handed in (a test's, the demo's oracle)."""
    from agent.local_policy import LocalModels

    if isinstance(policy, LocalModels):
        return LocalSwapController(store, registry, policy, prompt, settings.swap, owner=settings.replica_id)
    if not given and settings.policy_backend == "vllm":
        return HotSwapController(
            store,
            registry,
            settings.policy,
            prompt,
            settings.swap,
            owner=settings.replica_id,
            routes=getattr(policy, "invalidate", None),
        )
    return None


def _after_job(swap: SwapController | None) -> Callable[[Job], Awaitable[None]]:
    """When a retraining job ends, the gate and the swap take its candidate at once."""

    async def run(job: Job) -> None:
        candidate = job.detail.get("candidate")
        if swap is not None and swap.settings.auto_promote and candidate:
            await swap.gate_and_promote(str(candidate))

    return run


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
