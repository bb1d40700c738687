"""What a person does to a task: cancel, pause, take over a step, resume; on any replica.

The database's control record (``serve.tasks.cluster``) is the request every replica sees; the replica
that runs the episode applies it at once when it was asked itself, else on its next control poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent.actions import Action, ActionError, action_from_dict
from agent.secrets import public_action
from agent.store import TrajectoryStore
from agent.trajectory import Episode, EpisodeStatus, ImageSize, Step, utcnow
from serve.tasks.cluster import Cluster
from serve.tasks.errors import NotRunning, OffScreen
from serve.tasks.events import EventHub, end_event, held_event
from serve.tasks.takeover import Takeover, off_screen

log = logging.getLogger(__name__)

# The control record's action for "the held step goes on with the policy's own action".
POLICY_ACTION: dict[str, Any] = {"action": "policy"}


@dataclass
class RunningEpisode:
    """An episode this replica runs: its task, its cancel flag and its takeover state."""

    episode_id: str
    cancel: asyncio.Event
    task: asyncio.Task[None]
    takeover: Takeover = field(default_factory=Takeover)

    def stop(self) -> None:
        self.cancel.set()
        self.takeover.resume()  # a paused episode must not wait for a client that cancelled


class TaskControls:
    def __init__(
        self,
        store: TrajectoryStore,
        cluster: Cluster,
        running: dict[str, RunningEpisode],
        events: EventHub,
        poll_s: float,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.running = running  # the runner's own map: episodes this replica runs
        self.events = events
        self.poll_s = poll_s

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
                self.events.publish(episode_id, end_event(cancelled))
                return cancelled
            episode = await asyncio.to_thread(self.store.get, episode_id)  # a replica just started it
        if episode.status is not EpisodeStatus.RUNNING:
            return episode
        await asyncio.to_thread(self.cluster.request, episode_id, cancel=True)
        running = self.running.get(episode_id)
        if running is not None:
            running.stop()
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
            await asyncio.sleep(self.poll_s / 2)

    async def _running_anywhere(self, episode_id: str) -> None:
        if episode_id in self.running:
            return
        episode = await asyncio.to_thread(self.store.get, episode_id)
        if episode.status is not EpisodeStatus.RUNNING:
            raise NotRunning(f"task {episode_id} is {episode.status.value}")

    async def pause(self, episode_id: str) -> None:
        """Hold a running episode before its next action, for a takeover."""
        await self._running_anywhere(episode_id)
        await asyncio.to_thread(self.cluster.request, episode_id, paused=True, action=None)
        if (running := self.running.get(episode_id)) is not None:
            running.takeover.pause()
        self.events.publish(episode_id, {"event": "paused"})

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
        self.events.publish(
            episode_id, {"event": "taken_over", "action": public_action(action), "hold": hold}
        )

    async def _go_on(self, episode_id: str, action: Action | None, hold: bool) -> None:
        """Let the held step go on, here or through the control record for the replica running it."""
        if (running := self.running.get(episode_id)) is not None:
            await asyncio.to_thread(self.cluster.request, episode_id, paused=hold, action=None)
            running.takeover.resume(action, hold=hold)
        else:
            go_on = action.to_dict() if action is not None else POLICY_ACTION
            await asyncio.to_thread(self.cluster.request, episode_id, paused=hold, action=go_on)

    async def _screen(self, episode_id: str) -> ImageSize | None:
        """The screen a takeover acts on: the one the held step shows, else the last one recorded."""
        running = self.running.get(episode_id)
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
            if (running := self.running.get(episode_id)) is not None:
                running.takeover.resume()
        self.events.publish(episode_id, {"event": "resumed", "hold": hold})

    def on_hold(self, episode_id: str) -> Callable[[Step, str], Awaitable[None]]:
        """What a step held for approval does: record the pause for every replica, and tell the stream."""

        async def held(step: Step, reason: str) -> None:
            await asyncio.to_thread(self.cluster.request, episode_id, paused=True, action=None)
            proposed = step.device_action.to_dict() if step.device_action is not None else None
            self.events.publish(
                episode_id,
                {"event": "approval", "index": step.index, "reason": reason, "proposed_action": proposed},
            )

        return held

    def on_held(self, episode_id: str) -> Callable[[Step, str | None], Awaitable[None]]:
        """What any step that starts waiting for the client does: tell the stream (``held``)."""

        async def held(step: Step, reason: str | None) -> None:
            self.events.publish(episode_id, held_event(step, reason))

        return held

    def held_event(self, episode_id: str) -> dict[str, Any] | None:
        """The ``held`` event of the step waiting for the client on this replica, if one is."""
        found = self.held(episode_id)
        return held_event(*found) if found is not None else None

    def held(self, episode_id: str) -> tuple[Step, str | None] | None:
        """The step held for the client on this replica (with the policy's proposed action) and why
        (an approval rule's reason; None when a person paused it), if any."""
        running = self.running.get(episode_id)
        if running is None or running.takeover.held is None:
            return None
        return running.takeover.held, running.takeover.reason

    async def is_paused(self, episode_id: str) -> bool:
        """Whether a pause was asked for and not yet ended (the database is the record for all replicas)."""
        control = await asyncio.to_thread(self.cluster.control, episode_id)
        return control.paused

    async def apply_requests(self) -> None:
        """Apply what was asked of other replicas for the episodes this one runs."""
        controls = await asyncio.to_thread(self.cluster.controls, list(self.running))
        for episode_id, control in controls.items():
            running = self.running.get(episode_id)
            if running is None:
                continue
            if control.cancel:
                running.stop()
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
