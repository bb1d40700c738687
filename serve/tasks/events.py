"""The task event stream: steps and controls fanned out to every client watching a task.

A stream tells a client the task's whole state, not only what happens after it connects: the
steps recorded so far, then a ``held`` event when a step is waiting for the client right now (a
client that connects after the hold still learns of it), then live events; so a client waits on
the stream, never on a clock.

A step is published in every form it takes: when recorded (before its action runs, as another
replica's stream reads it from the store) and again when final. A stream sends each form once and
a client keeps the highest revision of each index. A task running on another replica is followed
through the store, read whenever a stream has had no news for two control polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from agent.store import TrajectoryStore
from agent.trajectory import Episode, Step


def step_revision(step: Step) -> int:
    """0 while a recorded step's action has not run yet, 1 once it has (or when there was none)."""
    return 0 if step.ended_at is None else 1


def end_event(episode: Episode) -> dict[str, Any]:
    """The stream's last event for a finished episode."""
    return {"event": "end", "status": episode.status.value, "error": episode.error, "answer": episode.answer}


def held_event(step: Step, reason: str | None) -> dict[str, Any]:
    """A step waits for the client: a person paused the task (``reason`` None) or a rule held it."""
    proposed = step.device_action.to_dict() if step.device_action is not None else None
    return {"event": "held", "index": step.index, "reason": reason, "proposed_action": proposed}


class EventHub:
    def __init__(self, store: TrajectoryStore, poll_s: float) -> None:
        self.store = store
        self.poll_s = poll_s  # without news for this long, a stream reads the store
        self._subscribers: dict[str, list[asyncio.Queue[dict[str, Any]]]] = {}

    def publish(self, episode_id: str, item: dict[str, Any]) -> None:
        for queue in self._subscribers.get(episode_id, []):
            queue.put_nowait(item)

    async def stream(
        self, episode_id: str, held: Callable[[], dict[str, Any] | None] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Every recorded step so far, the ``held`` event if a step waits now (``held`` says), then
        live events until the episode ends."""
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
            if held is not None and (now := held()) is not None:
                yield now
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), self.poll_s)
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
            subscribers = self._subscribers[episode_id]
            subscribers.remove(queue)
            if not subscribers:
                del self._subscribers[episode_id]
