"""The task runner: a bounded queue of episodes in front of the device pool.

A submitted task is an episode row with status ``pending`` (the request is kept on the row), so
the queue survives a restart: on start, pending episodes are queued again and episodes that were
``running`` when the service died are marked ``interrupted``. A queued task waits for a free device
that matches its selector; each device runs one episode at a time (a pool lease). Cancellation
takes effect before the next step. Shutdown gives running episodes a grace period, then stops
them and marks them interrupted; queued ones stay pending for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.actions import Action
from agent.episode import EpisodeRunner, EpisodeSettings, Review, Verdict
from agent.policy import Policy, SamplingSettings
from agent.prompt import PromptSettings
from agent.registry import ModelRegistry, RegistryError
from agent.store import EpisodeQuery, TrajectoryStore
from agent.trajectory import Episode, EpisodeStatus, Step, utcnow
from devices.pool import DevicePool, NoDeviceAvailable
from serve import metrics

log = logging.getLogger(__name__)


class DeviceSelector(BaseModel):
    model_config = ConfigDict(extra="forbid")

    serial: str | None = None
    model: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class TaskRequest(BaseModel):
    """What a client asks for. Unset limits take the service's defaults."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=2000)
    device: DeviceSelector = Field(default_factory=DeviceSelector)
    max_steps: int | None = Field(None, gt=0, le=200)
    timeout_s: float | None = Field(None, gt=0, le=24 * 3600)
    model: str | None = Field(None, max_length=256)  # a served model version or adapter name
    sampling: SamplingSettings | None = None
    idempotency_key: str | None = Field(None, max_length=128)


class UnknownModel(LookupError):
    pass


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the task queue is full")
        self.retry_after_s = retry_after_s


@dataclass
class RunnerSettings:
    max_queue: int = 100
    grace_s: float = 30.0
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    lease_ttl_s: float = 3600.0


class Takeover:
    """Lets a client pause a running episode before its next action and supply that action."""

    def __init__(self) -> None:
        self._resume = asyncio.Event()
        self._resume.set()
        self._replacement: Action | None = None
        self.waiting = asyncio.Event()  # set while a step waits for the client

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def pause(self) -> None:
        self._resume.clear()

    def resume(self, action: Action | None = None) -> None:
        self._replacement = action
        self._resume.set()

    async def review(self, episode: Episode, step: Step) -> Review:
        if not self._resume.is_set():
            self.waiting.set()
            await self._resume.wait()
            self.waiting.clear()
        action, self._replacement = self._replacement, None
        return Review(Verdict.REPLACE, action) if action is not None else Review()


@dataclass
class _Running:
    episode_id: str
    cancel: asyncio.Event
    task: asyncio.Task[None]
    takeover: Takeover = field(default_factory=Takeover)


class TaskRunner:
    def __init__(
        self,
        store: TrajectoryStore,
        pool: DevicePool,
        policy: Policy,
        settings: RunnerSettings | None = None,
        *,
        prompt: PromptSettings | None = None,
        registry: ModelRegistry | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.policy = policy
        self.settings = settings or RunnerSettings()
        self.prompt = prompt or PromptSettings()
        self.registry = registry
        self._queue: list[str] = []
        self._running: dict[str, _Running] = {}
        self._subscribers: dict[str, list[asyncio.Queue[dict[str, Any]]]] = {}
        self._wake = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Resume after a restart, then start scheduling."""
        for episode in await asyncio.to_thread(
            self.store.query, EpisodeQuery(status=EpisodeStatus.RUNNING, limit=10_000)
        ):
            await asyncio.to_thread(self.store.save_episode, episode.model_copy(update={
                "status": EpisodeStatus.INTERRUPTED, "finished_at": utcnow(), "error": "the service stopped while it ran"}))  # fmt: skip
        pending = await asyncio.to_thread(
            self.store.query, EpisodeQuery(status=EpisodeStatus.PENDING, limit=10_000)
        )
        self._queue = [e.id for e in sorted(pending, key=lambda e: e.created_at)]
        self._scheduler = asyncio.create_task(self._schedule(), name="task-scheduler")
        self._update_gauges()

    async def shutdown(self) -> None:
        self._stopping = True
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
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
                    await asyncio.to_thread(self.store.save_episode, episode.model_copy(update={
                        "status": EpisodeStatus.INTERRUPTED, "error": "the service stopped while it ran"}))  # fmt: skip

    # -- requests ----------------------------------------------------------------------------------
    async def submit(self, request: TaskRequest, *, submitted_by: str = "") -> tuple[Episode, bool]:
        """Queue a task; returns the episode and whether it is new (False: idempotent repeat)."""
        if request.idempotency_key:
            found = await asyncio.to_thread(
                self.store.query, EpisodeQuery(label=("idempotency_key", request.idempotency_key), limit=1)
            )
            if found:
                return found[0], False
        if len(self._queue) >= self.settings.max_queue or self._stopping:
            raise QueueFull(
                retry_after_s=max(5, len(self._queue) // max(1, len(self.pool.devices) or 1) * 10)
            )
        request = await asyncio.to_thread(self._route, request)
        labels = {"submitted_by": submitted_by} if submitted_by else {}
        if request.idempotency_key:
            labels["idempotency_key"] = request.idempotency_key
        episode = Episode(goal=request.goal, status=EpisodeStatus.PENDING, labels=labels,
                          extra={"request": request.model_dump(mode="json")})  # fmt: skip
        await asyncio.to_thread(self.store.save_episode, episode)
        self._queue.append(episode.id)
        metrics.TASKS.labels(status="submitted").inc()
        self._update_gauges()
        self._wake.set()
        return episode, True

    def _route(self, request: TaskRequest) -> TaskRequest:
        """Pin the task to a served model: the one it names (version or alias), else the default.

        With an empty registry, names go to the policy server as they are.
        """
        if self.registry is None:
            return request
        try:
            version = self.registry.resolve(request.model)
        except RegistryError:
            if not self.registry.versions():
                return request
            raise UnknownModel(f"no model version or alias {request.model!r}") from None
        if version is None:
            return request
        return request.model_copy(update={"model": version.served_name})

    async def cancel(self, episode_id: str) -> Episode:
        running = self._running.get(episode_id)
        if running is not None:
            running.cancel.set()
            running.takeover.resume()  # a paused episode must not wait for a client that cancelled
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(running.task), 60)
            return await asyncio.to_thread(self.store.get, episode_id)
        episode = await asyncio.to_thread(self.store.get, episode_id)
        if episode.status is EpisodeStatus.PENDING:
            with contextlib.suppress(ValueError):
                self._queue.remove(episode_id)
            episode = episode.model_copy(update={"status": EpisodeStatus.CANCELLED, "finished_at": utcnow(),
                                                 "error": "cancelled before it started"})  # fmt: skip
            await asyncio.to_thread(self.store.save_episode, episode)
            self._publish(episode_id, {"event": "end", "status": episode.status.value})
            self._update_gauges()
        return episode

    def takeover(self, episode_id: str) -> Takeover | None:
        running = self._running.get(episode_id)
        return running.takeover if running is not None else None

    def is_paused(self, episode_id: str) -> bool:
        takeover = self.takeover(episode_id)
        return takeover is not None and takeover.paused

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> list[str]:
        return list(self._running)

    async def events(self, episode_id: str) -> AsyncIterator[dict[str, Any]]:
        """Every recorded step so far, then live steps until the episode ends."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._subscribers.setdefault(episode_id, []).append(queue)
        try:
            episode = await asyncio.to_thread(self.store.get, episode_id)
            seen = set()
            for step in episode.steps:
                seen.add(step.index)
                yield {"event": "step", "step": step}
            if episode.status.finished:
                yield {
                    "event": "end",
                    "status": episode.status.value,
                    "error": episode.error,
                    "answer": episode.answer,
                }
                return
            while True:
                item = await queue.get()
                if item["event"] == "step":
                    if item["step"].index in seen:
                        continue
                    seen.add(item["step"].index)
                yield item
                if item["event"] == "end":
                    return
        finally:
            self._subscribers[episode_id].remove(queue)

    def _publish(self, episode_id: str, item: dict[str, Any]) -> None:
        for queue in self._subscribers.get(episode_id, []):
            queue.put_nowait(item)

    # -- scheduling --------------------------------------------------------------------------------
    def _update_gauges(self) -> None:
        metrics.QUEUE_DEPTH.set(len(self._queue))
        metrics.RUNNING.set(len(self._running))

    async def _schedule(self) -> None:
        while True:
            self._wake.clear()
            for episode_id in list(self._queue):
                if self._stopping:
                    return
                await self._try_start(episode_id)
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)  # devices may free up or appear
            except TimeoutError:
                await self.pool.refresh()

    async def _try_start(self, episode_id: str) -> None:
        episode = await asyncio.to_thread(self.store.get, episode_id)
        request = TaskRequest.model_validate(episode.extra.get("request") or {"goal": episode.goal})
        selector = request.device
        try:
            lease = await self.pool.acquire(holder=episode_id, serial=selector.serial, model=selector.model,
                                            labels=selector.labels, ttl_s=self.settings.lease_ttl_s)  # fmt: skip
        except NoDeviceAvailable:
            return
        self._queue.remove(episode_id)
        cancel = asyncio.Event()
        takeover = Takeover()
        task = asyncio.create_task(
            self._run(episode, request, lease, cancel, takeover), name=f"episode-{episode_id}"
        )
        self._running[episode_id] = _Running(episode_id, cancel, task, takeover)
        self._update_gauges()

    async def _run(
        self, episode: Episode, request: TaskRequest, lease: Any, cancel: asyncio.Event, takeover: Takeover
    ) -> None:
        updates: dict[str, Any] = {}
        if request.max_steps:
            updates["max_steps"] = request.max_steps
        if request.timeout_s:
            updates["timeout_s"] = request.timeout_s
        if request.model:
            updates["model"] = request.model
        if request.sampling:
            updates["sampling"] = request.sampling
        settings = self.settings.episode.model_copy(update=updates)

        async def on_step(ep: Episode, step: Step) -> None:
            metrics.observe_step(step)
            log.info("step", extra={
                "task_id": ep.id, "step": step.index, "source": step.source.value,
                "action": step.device_action.to_json() if step.device_action else None,
                "parse_error": step.parse_error.reason.value if step.parse_error else None,
                "policy_s": step.timings.policy_s, "device_s": step.timings.device_s, "model_version": step.model_version,
            })  # fmt: skip
            self._publish(ep.id, {"event": "step", "step": step})

        runner = EpisodeRunner(
            self.policy,
            self.pool.driver(lease),
            self.store,
            settings,
            self.prompt,
            reviewer=takeover,
            on_step=on_step,
        )
        try:
            final = await runner.run(request.goal, episode=episode, cancel=cancel)
            metrics.TASKS.labels(status=final.status.value).inc()
            log.info("task finished", extra={"task_id": final.id, "status": final.status.value, "error": final.error,
                                             "steps": len(final.steps), "device": lease.serial})  # fmt: skip
            self._publish(final.id, {"event": "end", "status": final.status.value, "error": final.error,
                                     "answer": final.answer})  # fmt: skip
        except Exception:
            log.exception("episode %s crashed", episode.id)
            crashed = await asyncio.to_thread(self.store.get, episode.id)
            await asyncio.to_thread(self.store.save_episode, crashed.model_copy(update={
                "status": EpisodeStatus.ERROR, "finished_at": utcnow(), "error": "internal error"}))  # fmt: skip
            self._publish(episode.id, {"event": "end", "status": "error", "error": "internal error"})
        finally:
            await self.pool.release(lease.id)
            self._running.pop(episode.id, None)
            self._update_gauges()
            self._wake.set()
