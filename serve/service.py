"""What the running service holds, and how it starts and stops.

``ServiceState.start(settings)`` builds every part in order: the store (migrated), the API keys
(and the keys file), the device pool (discovered, health-checked), the policy (vLLM by default, or
the in-process engine), the swap controller and the model router around both, the task runner
(which resumes queued tasks), the retraining scheduler and its promotion watcher. ``close()``
stops them in reverse, giving running episodes the runner's grace period.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent.checkpoint import checkpoint_system_prompt
from agent.jobs import Job, JobStore
from agent.policy import Policy, PolicyUnavailable
from agent.prompt import PromptSettings
from agent.registry import ModelRegistry
from agent.store import TrajectoryStore
from devices.adb import DriverSettings
from devices.pool import DevicePool, PoolSettings
from serve import db as serve_db
from serve.api.auth import KeyStore, sync_keys_file
from serve.models.promotion import Promotion
from serve.models.routing import ModelRouter
from serve.models.swap import LocalSwapController, SwapController, VllmSwapController
from serve.ops import metrics, retention
from serve.ops.scheduler import Scheduler
from serve.settings import ServeSettings
from serve.tasks.cluster import Cluster
from serve.tasks.runner import RunnerSettings, TaskRunner

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    settings: ServeSettings
    store: TrajectoryStore
    keys: KeyStore
    pool: DevicePool
    policy: Policy
    router: ModelRouter
    runner: TaskRunner
    registry: ModelRegistry
    jobs: JobStore
    scheduler: Scheduler
    # None with a policy handed in (tests, the demo's oracle): promotions only move aliases
    swap: SwapController | None
    background: list[asyncio.Task[None]] = field(default_factory=list)
    # The last readiness probe of each dependency: (monotonic time, passed), reused for a few seconds.
    probes: dict[str, tuple[float, bool]] = field(default_factory=dict)
    # The serving version and its swap's weights check as /readyz last read them: (time, record).
    serving: tuple[float, dict[str, Any] | None] | None = None

    @classmethod
    async def start(cls, settings: ServeSettings, policy: Policy | None = None) -> ServiceState:
        """Every part, started; ``policy`` replaces the one the settings name (tests, the demo)."""
        store, keys = _open_stores(settings)
        pool = DevicePool(
            PoolSettings(
                servers=settings.adb_servers, driver=DriverSettings(capture=settings.screenshot_capture)
            )
        )
        await pool.start()
        prompt = _serving_prompt(settings, given=policy is not None)
        registry = ModelRegistry(store.engine)
        chosen = policy or make_policy(settings, prompt)
        jobs = JobStore(store.engine)
        swap = swap_controller(settings, store, registry, chosen, prompt, given=policy is not None)
        router = ModelRouter(registry, chosen, prompt, jobs, swap=swap)
        runner = TaskRunner(
            store,
            pool,
            router,
            RunnerSettings(
                max_queue=settings.max_queue,
                grace_s=settings.shutdown_grace_s,
                episode=settings.episode,
                cluster_lease_ttl_s=settings.device_lease_ttl_s,
                approval=settings.approval,
            ),
            cluster=Cluster(store.engine, settings.replica_id, settings.device_lease_ttl_s),
        )
        await runner.start()
        promotion = Promotion(swap) if swap is not None and settings.swap.auto_promote else None
        scheduler = Scheduler(jobs, settings.scheduler, on_job_end=_after_job(promotion))
        background = _background_tasks(
            settings, promotion, scheduler, router, store, given=policy is not None
        )
        return cls(
            settings=settings,
            store=store,
            keys=keys,
            pool=pool,
            policy=chosen,
            router=router,
            runner=runner,
            registry=registry,
            jobs=jobs,
            scheduler=scheduler,
            swap=swap,
            background=background,
        )

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        await self.scheduler.aclose()
        if self.swap is not None:
            await self.swap.aclose()
        await self.runner.shutdown()
        await self.pool.stop()
        await self.policy.aclose()
        self.store.engine.dispose()


async def settle_image_transport(settings: ServeSettings, router: ModelRouter, retry_s: float = 30.0) -> None:
    """``auto``: tasks start with the service resizing screenshots; once the policy server's
    processor is checked to resize as the service does, the captured PNG goes to it as is
    (nothing decoded, resized or encoded here). A server not up yet is asked again later."""
    from agent.vllm_policy import VllmPolicy

    probe = VllmPolicy(settings.policy)
    try:
        while True:
            try:
                mismatch = await probe.image_sizing_mismatch(settings.resize)
            except PolicyUnavailable as exc:
                log.info("images are resized here for now: %s; asking again in %.0f s", exc, retry_s)
                await asyncio.sleep(retry_s)
                continue
            if mismatch is not None:
                router.images_checked(as_captured=False, why=mismatch)
                log.warning("images are resized here: %s", mismatch)
                return
            why = "the policy server's processor resizes as the service does"
            router.images_checked(as_captured=True, why=why)
            log.info("images go to the policy server as captured: %s", why)
            return
    finally:
        await probe.aclose()


def make_policy(settings: ServeSettings, prompt: PromptSettings) -> Policy:
    if settings.policy_backend == "local":
        if settings.local_model_dir is None:
            raise ValueError("policy_backend=local needs UIS1_LOCAL_MODEL_DIR")
        from agent.local_policy import LocalModels, LocalPolicy

        return LocalModels(LocalPolicy(settings.local_model_dir, prompt=prompt))
    from serve.models.engines import Engines

    return Engines(settings.policy, prompt=prompt, on_retry=metrics.POLICY_RETRIES.inc)


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
        return VllmSwapController(
            store,
            registry,
            settings.policy,
            prompt,
            settings.swap,
            owner=settings.replica_id,
        )
    return None


def _after_job(promotion: Promotion | None) -> Callable[[Job], Awaitable[None]]:
    """When a retraining job ends, the promotion watcher looks at once (the one path a candidate
    takes to the gate and the swap)."""

    async def run(job: Job) -> None:
        if promotion is not None:
            promotion.job_ended(job)

    return run


def _open_stores(settings: ServeSettings) -> tuple[TrajectoryStore, KeyStore]:
    """The trajectory store and the key store on its database, migrated; the keys file applied."""
    store = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
    store.migrate()
    keys = KeyStore(store.engine)
    serve_db.migrate(keys.engine)
    if settings.api_keys_file is not None:
        active, revoked = sync_keys_file(keys, settings.api_keys_file)
        log.info("keys file %s: %d key(s) active, %d revoked", settings.api_keys_file, active, revoked)
    return store, keys


def _serving_prompt(settings: ServeSettings, *, given: bool) -> PromptSettings:
    """The service's prompt; a checkpoint served in process keeps the system prompt it was trained with."""
    prompt = settings.prompt_settings()
    if not given and settings.policy_backend == "local" and settings.local_model_dir is not None:
        prompt = dataclasses.replace(prompt, system_prompt=checkpoint_system_prompt(settings.local_model_dir))
    return prompt


def _background_tasks(
    settings: ServeSettings,
    promotion: Promotion | None,
    scheduler: Scheduler,
    router: ModelRouter,
    store: TrajectoryStore,
    *,
    given: bool,
) -> list[asyncio.Task[None]]:
    """The promotion watcher, the retraining scheduler, the retention sweep and the image-transport
    check, as configured."""
    background = []
    if promotion is not None:
        background.append(asyncio.create_task(promotion.watch(), name="promotion-watcher"))
    if settings.scheduler.enabled:
        background.append(asyncio.create_task(scheduler.run(), name="retrain-scheduler"))
    if retention.enabled(settings.store):
        background.append(
            asyncio.create_task(retention.sweep_forever(store, settings.store), name="retention")
        )
    if not given and settings.image_transport == "auto" and settings.policy_backend == "vllm":
        background.append(asyncio.create_task(settle_image_transport(settings, router), name="image-check"))
    return background
