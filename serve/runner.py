"""The task runner: a bounded queue of episodes in front of the device pool.

A submitted task is an episode row with status ``pending`` (the request is kept on the row): the
queue lives in the database, so it survives a restart and is shared by every replica of the
service. A queued task waits for a free device that matches its selector; each device runs one
episode at a time, held by a pool lease in this process and a device lease in the database
(``serve.cluster``), and a task starts only on the replica whose compare-and-set moves it from
``pending`` to ``running``. Cancellation takes effect before the next step, whichever replica is
asked. Shutdown gives running episodes a grace period, then stops them and marks them
interrupted; queued ones stay pending for the next start or another replica. Episodes of a
replica that died are marked interrupted once its leases expire (at once when it restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from agent.actions import Action, ActionError, action_from_dict
from agent.episode import EpisodeRunner, EpisodeSettings
from agent.jobs import JobStore
from agent.policy import Policy, SamplingSettings
from agent.prompt import PromptSettings
from agent.registry import Kind, ModelRegistry, RegistryError
from agent.store import EpisodeQuery, TrajectoryStore
from agent.trajectory import Episode, EpisodeStatus, ImageSize, Step, utcnow
from devices.pool import DevicePool, NoDeviceAvailable
from serve import metrics
from serve.cluster import Cluster, device_key
from serve.schemas import step_revision
from serve.swap import HOLD_LOCK, LOADED
from serve.takeover import Approval, Takeover, off_screen

log = logging.getLogger(__name__)


# A selector names a phone, not a document: a pool's labels are a handful of short tags.
MAX_LABELS = 32
# The control record's action for "the held step goes on with the policy's own action".
POLICY_ACTION: dict[str, Any] = {"action": "policy"}
LabelKey = Annotated[str, Field(min_length=1, max_length=64)]
LabelValue = Annotated[str, Field(max_length=256)]


class DeviceSelector(BaseModel):
    model_config = ConfigDict(extra="forbid")

    serial: str | None = Field(None, max_length=256)
    model: str | None = Field(None, max_length=256)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)


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
    paused: bool = Field(False, description="Start held before the first action (supervised from the start).")
    approval: Approval | None = Field(
        None, description="Actions that wait for a person (default: the service's)."
    )


class UnknownModel(LookupError):
    pass


class NoSuchDevice(LookupError):
    """No device the pool knows matches the task's selector: it would wait in the queue forever."""


class NotRunning(LookupError):
    pass


class OffScreen(ValueError):
    """A takeover action that does not fit on the screen it would act on."""


def end_event(episode: Episode) -> dict[str, Any]:
    """The stream's last event for a finished episode."""
    return {"event": "end", "status": episode.status.value, "error": episode.error, "answer": episode.answer}


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the task queue is full")
        self.retry_after_s = retry_after_s


@dataclass
class RunnerSettings:
    max_queue: int = 100
    grace_s: float = 30.0
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    lease_ttl_s: float = 3600.0  # the pool's own lease, in this process
    cluster_lease_ttl_s: float = 30.0  # the database lease, renewed while the episode runs
    control_poll_s: float = 0.5  # how often requests sent to other replicas are picked up
    approval: Approval = field(default_factory=Approval)  # unless a task sets its own


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
        cluster: Cluster | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.policy = policy
        self.settings = settings or RunnerSettings()
        self.prompt = prompt or PromptSettings()
        self.registry = registry
        self.cluster = cluster or Cluster(store.engine, "local", self.settings.cluster_lease_ttl_s)
        self._queue_depth = 0
        self._running: dict[str, _Running] = {}
        self._subscribers: dict[str, list[asyncio.Queue[dict[str, Any]]]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.jobs = JobStore(store.engine)
        self._hold = False
        self._hold_read_at = -1.0

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
                    await asyncio.to_thread(
                        self.store.save_episode,
                        episode.model_copy(
                            update={
                                "status": EpisodeStatus.INTERRUPTED,
                                "error": "the service stopped while it ran",
                            }
                        ),
                    )
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
        await asyncio.to_thread(self._route, request)  # an unknown model is refused now; pinned at start
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

    def _route(self, request: TaskRequest) -> tuple[TaskRequest, str | None]:
        """Pin the task to a model version: the one it names (version or alias), else the default.

        Returns the request with the served name to ask the policy server for, and the version.
        """
        served, version = self.resolve_model(request.model)
        return request.model_copy(update={"model": served}), version

    def resolve_model(self, name: str | None) -> tuple[str | None, str | None]:
        """The served name to ask the policy server for and the registry version, for a name a client
        sent (a version or an alias; None: the default). A name the registry does not know never
        reaches the policy server: with an empty registry, only the policy's own model is known.
        """
        if self.registry is None:
            return name, None
        try:
            version = self.registry.resolve(name)
        except RegistryError:
            if name == self.policy.model_version and not self.registry.versions():
                return name, None
            raise UnknownModel(f"no model version or alias {name!r}") from None
        if version is None:
            return name, None
        if version.kind != Kind.ADAPTER and not version.endpoint:
            held = self.registry.aliases().get(LOADED + version.served_name)
            if held is not None and held != version.name:
                raise UnknownModel(
                    f"model version {version.name} is not being served: the engine serving "
                    f"{version.served_name!r} holds {held}"
                )
        return version.served_name, version.name

    def prompt_for(self, version: str | None) -> PromptSettings:
        """The prompt a task pinned to ``version`` runs with: the system prompt that version was
        trained with (the registry keeps it), else the service's."""
        if self.registry is None or version is None:
            return self.prompt
        try:
            return self.registry.get(version).prompt_of(self.prompt)
        except RegistryError:
            return self.prompt

    async def cancel(self, episode_id: str) -> Episode:
        """Cancel a queued task, or stop a running one before its next step (on any replica)."""
        episode = await asyncio.to_thread(self.store.get, episode_id)
        if episode.status is EpisodeStatus.PENDING:
            cancelled = episode.model_copy(
                update={
                    "status": EpisodeStatus.CANCELLED,
                    "finished_at": utcnow(),
                    "error": "cancelled before it started",
                }
            )
            if await asyncio.to_thread(self.store.transition, cancelled, EpisodeStatus.PENDING):
                self._publish(episode_id, end_event(cancelled))
                self._update_gauges()
                return cancelled
            episode = await asyncio.to_thread(self.store.get, episode_id)  # a replica just started it
        if episode.status is not EpisodeStatus.RUNNING:
            return episode
        await asyncio.to_thread(self.cluster.request, episode_id, cancel=True)
        running = self._running.get(episode_id)
        if running is not None:
            self._apply_cancel(running)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(running.task), 60)
            return await asyncio.to_thread(self.store.get, episode_id)
        return await self._wait_finished(episode_id, 60)

    async def _wait_finished(self, episode_id: str, timeout_s: float) -> Episode:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            episode = await asyncio.to_thread(self.store.get, episode_id)
            if episode.status.finished or asyncio.get_running_loop().time() > deadline:
                return episode
            await asyncio.sleep(self.settings.control_poll_s / 2)

    @staticmethod
    def _apply_cancel(running: _Running) -> None:
        running.cancel.set()
        running.takeover.resume()  # a paused episode must not wait for a client that cancelled

    async def _running_anywhere(self, episode_id: str) -> None:
        if episode_id in self._running:
            return
        episode = await asyncio.to_thread(self.store.get, episode_id)
        if episode.status is not EpisodeStatus.RUNNING:
            raise NotRunning(f"task {episode_id} is {episode.status.value}")

    async def pause(self, episode_id: str) -> None:
        """Hold a running episode before its next action, for a takeover."""
        await self._running_anywhere(episode_id)
        await asyncio.to_thread(self.cluster.request, episode_id, paused=True, action=None)
        if (running := self._running.get(episode_id)) is not None:
            running.takeover.pause()
        self._publish(episode_id, {"event": "paused"})

    async def take_over(self, episode_id: str, action: Action, *, hold: bool = False) -> None:
        """Supply the paused episode's next action (device pixels); it goes on with it, and with
        ``hold`` is held again before the action after it.

        Raises ``OffScreen`` for a point outside the screen, and ``NotRunning`` before there is a
        screen to act on.
        """
        if not await self.is_paused(episode_id):
            raise NotRunning("pause the running task first")
        screen = await self._screen(episode_id)
        if screen is None:
            raise NotRunning("the task has not shown a screen yet")
        if (problem := off_screen(action, screen)) is not None:
            raise OffScreen(problem)
        await self._go_on(episode_id, action, hold)
        self._publish(episode_id, {"event": "taken_over", "action": action.to_dict(), "hold": hold})

    async def _go_on(self, episode_id: str, action: Action | None, hold: bool) -> None:
        """Let the held step go on, here or through the control record for the replica running it."""
        if (running := self._running.get(episode_id)) is not None:
            await asyncio.to_thread(self.cluster.request, episode_id, paused=hold, action=None)
            running.takeover.resume(action, hold=hold)
        else:
            go_on = action.to_dict() if action is not None else POLICY_ACTION
            await asyncio.to_thread(self.cluster.request, episode_id, paused=hold, action=go_on)

    async def _screen(self, episode_id: str) -> ImageSize | None:
        """The screen a takeover acts on: the one the held step shows, else the last one recorded."""
        running = self._running.get(episode_id)
        if running is not None and running.takeover.screen is not None:
            return running.takeover.screen
        episode = await asyncio.to_thread(self.store.get, episode_id)
        return next((s.screenshot.size for s in reversed(episode.steps) if s.screenshot.size), None)

    async def resume(self, episode_id: str, *, hold: bool = False) -> None:
        """Let a paused episode go on with the policy's own action; with ``hold``, for one step."""
        await self._running_anywhere(episode_id)
        if hold:
            await self._go_on(episode_id, None, True)
        else:
            await asyncio.to_thread(self.cluster.request, episode_id, paused=False, action=None)
            if (running := self._running.get(episode_id)) is not None:
                running.takeover.resume()
        self._publish(episode_id, {"event": "resumed", "hold": hold})

    def _on_hold(self, episode_id: str) -> Callable[[Step, str], Awaitable[None]]:
        """What a step held for approval does: record the pause for every replica, and tell the stream."""

        async def held(step: Step, reason: str) -> None:
            await asyncio.to_thread(self.cluster.request, episode_id, paused=True, action=None)
            proposed = step.device_action.to_dict() if step.device_action is not None else None
            self._publish(
                episode_id,
                {"event": "approval", "index": step.index, "reason": reason, "proposed_action": proposed},
            )

        return held

    def held(self, episode_id: str) -> tuple[Step, str | None] | None:
        """The step held for the client on this replica (with the policy's proposed action) and why
        (an approval rule's reason; None when a person paused it), if any."""
        running = self._running.get(episode_id)
        if running is None or running.takeover.held is None:
            return None
        return running.takeover.held, running.takeover.reason

    async def is_paused(self, episode_id: str) -> bool:
        """Whether a pause was asked for and not yet ended (the database is the record for all replicas)."""
        control = await asyncio.to_thread(self.cluster.control, episode_id)
        return control.paused

    @property
    def queue_depth(self) -> int:
        """Tasks waiting for a device, across replicas, as of the last scheduling pass."""
        return self._queue_depth

    @property
    def running(self) -> list[str]:
        return list(self._running)

    async def events(self, episode_id: str) -> AsyncIterator[dict[str, Any]]:
        """Every recorded step so far, then live events until the episode ends.

        A step is sent in every form it takes: when recorded (before its action runs, as another
        replica's stream reads it from the store) and again when final; a client keeps the highest
        revision of each index. Pauses, resumes and takeovers asked of this replica are events too.
        """
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._subscribers.setdefault(episode_id, []).append(queue)
        sent: dict[int, int] = {}  # index -> revision sent

        def fresh(step: Step) -> bool:
            if step_revision(step) <= sent.get(step.index, -1):
                return False
            sent[step.index] = step_revision(step)
            return True

        async def stored() -> tuple[Episode, list[dict[str, Any]]]:
            """The episode as the store has it, and its steps not yet sent in that form."""
            episode = await asyncio.to_thread(self.store.get, episode_id)
            return episode, [{"event": "step", "step": step} for step in episode.steps if fresh(step)]

        try:
            episode, unsent = await stored()
            for event in unsent:
                yield event
            if episode.status.finished:
                yield end_event(episode)
                return
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), self.settings.control_poll_s * 2)
                except TimeoutError:  # the episode may run on another replica: read the store
                    episode, unsent = await stored()
                    for event in unsent:
                        yield event
                    if episode.status.finished:
                        yield end_event(episode)
                        return
                    continue
                if item["event"] == "step" and not fresh(item["step"]):
                    continue
                if item["event"] == "end":  # steps the store has that were not published here
                    for event in (await stored())[1]:
                        yield event
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
            held = bool(pending) and await self._held()
            for episode in [] if held else pending:  # shutdown cancels this task: no check of _stopping
                if episode.id not in self._running:
                    await self._try_start(episode)
            self._update_gauges()
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)  # devices may free up or appear
            except TimeoutError:
                await self.pool.refresh()

    async def _try_start(self, episode: Episode) -> None:
        request = TaskRequest.model_validate(episode.extra.get("request") or {"goal": episode.goal})
        selector = request.device
        elsewhere: set[str] = set()  # devices another replica holds
        while True:
            try:
                lease = await self.pool.acquire(
                    holder=episode.id,
                    serial=selector.serial,
                    model=selector.model,
                    labels=selector.labels,
                    ttl_s=self.settings.lease_ttl_s,
                    exclude=elsewhere,
                )
            except NoDeviceAvailable:
                return
            key = device_key(self.pool.devices[lease.serial].server, lease.serial)
            if await asyncio.to_thread(self.cluster.lease, key, episode.id):
                break
            elsewhere.add(lease.serial)
            await self.pool.release(lease.id)
        started = episode.model_copy(update={"status": EpisodeStatus.RUNNING, "started_at": utcnow()})
        if not await asyncio.to_thread(self.store.transition, started, EpisodeStatus.PENDING):
            # Another replica started it, or a client cancelled it, in between.
            await asyncio.to_thread(self.cluster.release, episode.id)
            await self.pool.release(lease.id)
            return
        # A swap that holds new episodes counts the running ones only after its grace period, so an
        # episode that sees no hold here is one the swap will wait for; one that sees it goes back.
        if await self._held(fresh=True):
            await asyncio.to_thread(self.store.transition, episode, EpisodeStatus.RUNNING)
            await asyncio.to_thread(self.cluster.release, episode.id)
            await self.pool.release(lease.id)
            return
        try:  # the version is pinned now, when the episode starts, and kept to its end
            request, version = await asyncio.to_thread(self._route, request)
        except (UnknownModel, RegistryError) as exc:
            await asyncio.to_thread(
                self.store.save_episode,
                started.model_copy(
                    update={"status": EpisodeStatus.ERROR, "finished_at": utcnow(), "error": str(exc)}
                ),
            )
            await asyncio.to_thread(self.cluster.end, episode.id)
            await self.pool.release(lease.id)
            self._publish(episode.id, {"event": "end", "status": "error", "error": str(exc)})
            return
        if version is not None:
            started = started.model_copy(update={"model_version": version})
        cancel = asyncio.Event()
        takeover = Takeover(request.approval or self.settings.approval, self._on_hold(episode.id))
        if request.paused:
            takeover.pause()
            await asyncio.to_thread(self.cluster.request, episode.id, paused=True, action=None)
        task = asyncio.create_task(
            self._run(started, request, lease, cancel, takeover), name=f"episode-{episode.id}"
        )
        self._running[episode.id] = _Running(episode.id, cancel, task, takeover)
        self._queue_depth = max(0, self._queue_depth - 1)
        self._update_gauges()

    async def _held(self, *, fresh: bool = False) -> bool:
        """Whether a hot swap holds new episodes back (read at most every half second)."""
        now = time.monotonic()
        if fresh or now - self._hold_read_at > 0.5:
            self._hold = await asyncio.to_thread(self.jobs.held, HOLD_LOCK)
            self._hold_read_at = now
        return self._hold

    async def _keep_alive(self) -> None:
        """Renew this replica's device leases, apply control requests, sweep dead replicas' episodes."""
        loop = asyncio.get_running_loop()
        last_renew = last_sweep = loop.time()
        while True:
            await asyncio.sleep(self.settings.control_poll_s)
            try:
                await self._apply_controls()
                now = loop.time()
                if now - last_renew >= self.settings.cluster_lease_ttl_s / 3:
                    await asyncio.to_thread(self.cluster.renew, list(self._running))
                    last_renew = now
                if now - last_sweep >= self.settings.cluster_lease_ttl_s / 2:
                    await self._interrupt_orphans()
                    last_sweep = now
            except Exception:  # a database hiccup must not stop the loop
                log.exception("keep-alive pass failed")

    async def _apply_controls(self) -> None:
        controls = await asyncio.to_thread(self.cluster.controls, list(self._running))
        for episode_id, control in controls.items():
            running = self._running.get(episode_id)
            if running is None:
                continue
            if control.cancel:
                self._apply_cancel(running)
            elif control.action is not None:
                await asyncio.to_thread(self.cluster.request, episode_id, action=None)
                try:
                    action = None if control.action == POLICY_ACTION else action_from_dict(control.action)
                except ActionError:
                    log.warning("ignored an invalid takeover action for %s", episode_id)
                else:
                    running.takeover.resume(action, hold=control.paused)
            elif control.paused and not running.takeover.paused:
                running.takeover.pause()
            elif not control.paused and running.takeover.paused:
                running.takeover.resume()

    async def _interrupt_orphans(self) -> None:
        """Mark ``running`` episodes that no live replica holds as interrupted."""
        running = await asyncio.to_thread(
            self.store.query, EpisodeQuery(status=EpisodeStatus.RUNNING, limit=10_000)
        )
        held = set((await asyncio.to_thread(self.cluster.holders)).values())  # read after the episodes
        for episode in running:
            if episode.id in self._running or episode.id in held:
                continue
            interrupted = episode.model_copy(
                update={
                    "status": EpisodeStatus.INTERRUPTED,
                    "finished_at": utcnow(),
                    "error": "the service stopped while it ran",
                }
            )
            if await asyncio.to_thread(self.store.transition, interrupted, EpisodeStatus.RUNNING):
                await asyncio.to_thread(self.cluster.end, episode.id)
                log.warning("task interrupted", extra={"task_id": episode.id})

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
        if episode.model_version:
            updates["version"] = episode.model_version
        if request.sampling:
            updates["sampling"] = request.sampling
        settings = self.settings.episode.model_copy(update=updates)

        async def on_step(ep: Episode, step: Step) -> None:
            metrics.observe_step(step)
            log.info(
                "step",
                extra={
                    "task_id": ep.id,
                    "step": step.index,
                    "source": step.source.value,
                    "action": step.device_action.to_json() if step.device_action else None,
                    "parse_error": step.parse_error.reason.value if step.parse_error else None,
                    "policy_s": step.timings.policy_s,
                    "device_s": step.timings.device_s,
                    "model_version": step.model_version,
                },
            )
            self._publish(ep.id, {"event": "step", "step": step})

        try:
            prompt = await asyncio.to_thread(self.prompt_for, episode.model_version)
            runner = EpisodeRunner(
                self.policy,
                self.pool.driver(lease),
                self.store,
                settings,
                prompt,
                reviewer=takeover,
                on_step=on_step,
            )
            final = await runner.run(request.goal, episode=episode, cancel=cancel)
            metrics.TASKS.labels(status=final.status.value).inc()
            log.info(
                "task finished",
                extra={
                    "task_id": final.id,
                    "status": final.status.value,
                    "error": final.error,
                    "steps": len(final.steps),
                    "device": lease.serial,
                },
            )
            self._publish(final.id, end_event(final))
        except Exception:
            log.exception("episode %s crashed", episode.id)
            crashed = await asyncio.to_thread(self.store.get, episode.id)
            await asyncio.to_thread(
                self.store.save_episode,
                crashed.model_copy(
                    update={"status": EpisodeStatus.ERROR, "finished_at": utcnow(), "error": "internal error"}
                ),
            )
            self._publish(episode.id, {"event": "end", "status": "error", "error": "internal error"})
        finally:
            await asyncio.to_thread(self.cluster.end, episode.id)
            await self.pool.release(lease.id)
            self._running.pop(episode.id, None)
            self._update_gauges()
            self._wake.set()
