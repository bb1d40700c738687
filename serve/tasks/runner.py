"""The task runner: a bounded queue of episodes in front of the device pool.

A submitted task is an episode row with status ``pending`` (the request is kept on the row): the
queue lives in the database, so it survives a restart and is shared by every replica of the
service. A queued task waits for a free device that matches its selector; each device runs one
episode at a time, held by a pool lease in this process and a device lease in the database
(``serve.tasks.cluster``), and a task starts only on the replica whose compare-and-set moves it from
``pending`` to ``running``. Cancellation takes effect before the next step, whichever replica is
asked. Shutdown gives running episodes a grace period, then stops them and marks them
interrupted; queued ones stay pending for the next start or another replica. Episodes of a
replica that died are marked interrupted once its leases expire (at once when it restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from agent.episode import EpisodeSettings
from agent.registry import RegistryError
from agent.store import EpisodeQuery, TrajectoryStore
from agent.trajectory import Episode, EpisodeStatus, utcnow
from devices.pool import DevicePool, Lease, NoDeviceAvailable
from serve.models.routing import ModelRouter, Route, UnknownModel
from serve.ops import metrics
from serve.tasks.cluster import Cluster, device_key
from serve.tasks.controls import RunningEpisode, TaskControls
from serve.tasks.episode import focus_probe, run_task_episode
from serve.tasks.errors import NoSuchDevice, QueueFull
from serve.tasks.events import EventHub
from serve.tasks.request import TaskRequest
from serve.tasks.takeover import Approval, Takeover

log = logging.getLogger(__name__)


@dataclass
class RunnerSettings:
    max_queue: int = 100
    grace_s: float = 30.0
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    lease_ttl_s: float = 3600.0  # the pool's own lease, in this process
    cluster_lease_ttl_s: float = 30.0  # the database lease, renewed while the episode runs
    control_poll_s: float = 0.5  # how often requests sent to other replicas are picked up
    approval: Approval = field(default_factory=Approval)  # unless a task sets its own


class TaskRunner:
    def __init__(
        self,
        store: TrajectoryStore,
        pool: DevicePool,
        router: ModelRouter,
        settings: RunnerSettings | None = None,
        *,
        cluster: Cluster | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.router = router
        self.settings = settings or RunnerSettings()
        self.cluster = cluster or Cluster(store.engine, "local", self.settings.cluster_lease_ttl_s)
        self._queue_depth = 0
        self._running: dict[str, RunningEpisode] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.events = EventHub(store, self.settings.control_poll_s * 2)
        self.controls = TaskControls(
            store, self.cluster, self._running, self.events, self.settings.control_poll_s
        )

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover from this replica's previous life, then start scheduling."""
        await asyncio.to_thread(self.cluster.drop_own)
        await self._interrupt_orphans()
        self._tasks = [
            asyncio.create_task(self._schedule(), name="task-scheduler"),
            asyncio.create_task(self._keep_alive(), name="task-keepalive"),
        ]
        self._update_gauges()

    async def shutdown(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        running = list(self._running.values())
        if running:
            _, late = await asyncio.wait([r.task for r in running], timeout=self.settings.grace_s)
            for run in running:
                if run.task in late:
                    run.cancel.set()  # stops before the next step
            if late:
                await asyncio.wait(late, timeout=self.settings.grace_s)
            for run in running:
                episode = await asyncio.to_thread(self.store.get, run.episode_id)
                if episode.status in (EpisodeStatus.RUNNING, EpisodeStatus.CANCELLED) and run.task in late:
                    await asyncio.to_thread(self.store.save_episode, _interrupted(episode))
                await asyncio.to_thread(self.cluster.end, run.episode_id)

    # -- requests ----------------------------------------------------------------------------------
    async def submit(self, request: TaskRequest, *, submitted_by: str = "") -> tuple[Episode, bool]:
        """Queue a task; returns the episode and whether it is new (False: idempotent repeat)."""
        if request.idempotency_key:
            found = await asyncio.to_thread(
                self.store.query, EpisodeQuery(label=("idempotency_key", request.idempotency_key), limit=1)
            )
            if found:
                return found[0], False
        depth = await asyncio.to_thread(self.store.count, EpisodeStatus.PENDING)
        if depth >= self.settings.max_queue or self._stopping:
            raise QueueFull(retry_after_s=max(5, depth // max(1, len(self.pool.devices)) * 10))
        await self.router.admit(request.model)  # an unknown model is refused now; pinned at start
        wanted = request.device
        if self.pool.known_match(wanted.serial, wanted.model, wanted.labels) is False:
            await self.pool.refresh()  # a phone plugged in since the last health check counts
        if self.pool.known_match(wanted.serial, wanted.model, wanted.labels) is False:
            known = ", ".join(sorted(self.pool.devices)) or "none"
            raise NoSuchDevice(
                f"no device matches {wanted.model_dump(exclude_defaults=True)} (known: {known}); "
                "connect it first (POST /v1/devices/connect)"
            )
        labels = {"submitted_by": submitted_by} if submitted_by else {}
        if request.idempotency_key:
            labels["idempotency_key"] = request.idempotency_key
        episode = Episode(
            goal=request.goal,
            status=EpisodeStatus.PENDING,
            labels=labels,
            extra={"request": request.model_dump(mode="json")},
        )
        await asyncio.to_thread(self.store.save_episode, episode)
        self._queue_depth = depth + 1
        metrics.TASKS.labels(status="submitted").inc()
        self._update_gauges()
        self._wake.set()
        return episode, True

    @property
    def queue_depth(self) -> int:
        """Tasks waiting for a device, across replicas, as of the last scheduling pass."""
        return self._queue_depth

    @property
    def running(self) -> list[str]:
        return list(self._running)

    # -- scheduling --------------------------------------------------------------------------------
    def _update_gauges(self) -> None:
        metrics.QUEUE_DEPTH.set(self._queue_depth)
        metrics.RUNNING.set(len(self._running))

    async def _schedule(self) -> None:
        while not self._stopping:
            self._wake.clear()
            pending = await asyncio.to_thread(
                self.store.query,
                EpisodeQuery(status=EpisodeStatus.PENDING, limit=self.settings.max_queue, oldest_first=True),
            )
            self._queue_depth = len(pending)
            held = bool(pending) and await self.router.swap_holds()
            for episode in [] if held else pending:  # shutdown cancels this task: no check of _stopping
                if episode.id not in self._running:
                    await self._try_start(episode)
            self._update_gauges()
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)  # devices may free up or appear
            except TimeoutError:
                await self.pool.refresh()

    async def _try_start(self, episode: Episode) -> None:
        """Start a pending episode if a matching phone is free here and in the cluster; its model
        version is pinned now. Does nothing (it stays pending) when no phone is free or a swap holds."""
        request = TaskRequest.model_validate(episode.extra.get("request") or {"goal": episode.goal})
        lease = await self._lease_for(episode.id, request)
        if lease is None:
            return
        started = episode.model_copy(update={"status": EpisodeStatus.RUNNING, "started_at": utcnow()})
        if not await asyncio.to_thread(self.store.transition, started, EpisodeStatus.PENDING):
            # Another replica started it, or a client cancelled it, in between.
            await asyncio.to_thread(self.cluster.release, episode.id)
            await self.pool.release(lease.id)
            return
        # A swap that holds new episodes counts the running ones only after its grace period, so an
        # episode that sees no hold here is one the swap will wait for; one that sees it goes back.
        if await self.router.swap_holds(fresh=True):
            await asyncio.to_thread(self.store.transition, episode, EpisodeStatus.RUNNING)
            await asyncio.to_thread(self.cluster.release, episode.id)
            await self.pool.release(lease.id)
            return
        try:  # the version is pinned now, when the episode starts, and kept to its end
            route = await asyncio.to_thread(self.router.route, request.model)
        except (UnknownModel, RegistryError) as exc:
            await asyncio.to_thread(
                self.store.save_episode,
                started.model_copy(
                    update={"status": EpisodeStatus.ERROR, "finished_at": utcnow(), "error": str(exc)}
                ),
            )
            await asyncio.to_thread(self.cluster.end, episode.id)
            await self.pool.release(lease.id)
            self.events.publish(episode.id, {"event": "end", "status": "error", "error": str(exc)})
            return
        if route.version is not None:
            started = started.model_copy(update={"model_version": route.version})
        cancel = asyncio.Event()
        takeover = Takeover(
            request.approval or self.settings.approval,
            self.controls.on_hold(episode.id),
            focus_probe(self.pool.driver(lease)),
            self.controls.on_held(episode.id),
        )
        if request.paused:
            takeover.pause()
            await asyncio.to_thread(self.cluster.request, episode.id, paused=True, action=None)
        task = asyncio.create_task(
            self._run(started, request, route, lease, cancel, takeover), name=f"episode-{episode.id}"
        )
        self._running[episode.id] = RunningEpisode(episode.id, cancel, task, takeover)
        self._queue_depth = max(0, self._queue_depth - 1)
        self._update_gauges()

    async def _lease_for(self, holder: str, request: TaskRequest) -> Lease | None:
        """A free phone matching the request, leased here and in the cluster (None: none is free)."""
        selector = request.device
        elsewhere: set[str] = set()  # devices another replica holds
        while True:
            try:
                lease = await self.pool.acquire(
                    holder=holder,
                    serial=selector.serial,
                    model=selector.model,
                    labels=selector.labels,
                    ttl_s=self.settings.lease_ttl_s,
                    exclude=elsewhere,
                )
            except NoDeviceAvailable:
                return None
            key = device_key(self.pool.devices[lease.serial].server, lease.serial)
            if await asyncio.to_thread(self.cluster.lease, key, holder):
                return lease
            elsewhere.add(lease.serial)
            await self.pool.release(lease.id)

    async def _keep_alive(self) -> None:
        """Renew this replica's device leases, apply control requests, sweep dead replicas' episodes."""
        loop = asyncio.get_running_loop()
        last_renew = last_sweep = loop.time()
        while True:
            await asyncio.sleep(self.settings.control_poll_s)
            try:
                await self.controls.apply_requests()
                now = loop.time()
                if now - last_renew >= self.settings.cluster_lease_ttl_s / 3:
                    await asyncio.to_thread(self.cluster.renew, list(self._running))
                    last_renew = now
                if now - last_sweep >= self.settings.cluster_lease_ttl_s / 2:
                    await self._interrupt_orphans()
                    last_sweep = now
            except Exception:  # a database hiccup must not stop the loop
                log.exception("keep-alive pass failed")

    async def _interrupt_orphans(self) -> None:
        """Mark ``running`` episodes that no live replica holds as interrupted."""
        running = await asyncio.to_thread(
            self.store.query, EpisodeQuery(status=EpisodeStatus.RUNNING, limit=10_000)
        )
        held = set((await asyncio.to_thread(self.cluster.holders)).values())  # read after the episodes
        for episode in running:
            if episode.id in self._running or episode.id in held:
                continue
            if await asyncio.to_thread(self.store.transition, _interrupted(episode), EpisodeStatus.RUNNING):
                await asyncio.to_thread(self.cluster.end, episode.id)
                log.warning("task interrupted", extra={"task_id": episode.id})

    async def _run(
        self,
        episode: Episode,
        request: TaskRequest,
        route: Route,
        lease: Any,
        cancel: asyncio.Event,
        takeover: Takeover,
    ) -> None:
        try:
            await run_task_episode(
                episode,
                request,
                route,
                self.pool.driver(lease),
                policy=self.router.policy_for(route),
                store=self.store,
                settings=self.settings.episode,
                takeover=takeover,
                events=self.events,
                cancel=cancel,
            )
        finally:
            await asyncio.to_thread(self.cluster.end, episode.id)
            await self.pool.release(lease.id)
            self._running.pop(episode.id, None)
            self._update_gauges()
            self._wake.set()


def _interrupted(episode: Episode) -> Episode:
    """The episode ended by the service stopping under it (this replica's shutdown, or found
    running with no live replica holding it)."""
    return episode.model_copy(
        update={
            "status": EpisodeStatus.INTERRUPTED,
            "finished_at": utcnow(),
            "error": "the service stopped while it ran",
        }
    )
