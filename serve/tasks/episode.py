"""One task's episode on its leased phone: the settings the task asked for, the episode loop,
and what each step and the end tell the logs, the metrics and the event stream.

The runner (``serve.tasks.runner``) leases the phone and the database lease before and gives both back
after; everything between is here. A crash inside the loop ends the task as an error with the
steps already taken kept (the loop records each step before its action runs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from agent.episode import EpisodeRunner, EpisodeSettings
from agent.policy import Policy
from agent.secrets import focus_of
from agent.store import TrajectoryStore
from agent.trajectory import Episode, EpisodeStatus, Step, utcnow
from devices.base import Device
from serve.models.routing import Route
from serve.ops import metrics
from serve.tasks.events import EventHub, end_event
from serve.tasks.request import TaskRequest
from serve.tasks.takeover import Takeover

log = logging.getLogger(__name__)


def episode_settings(defaults: EpisodeSettings, request: TaskRequest, route: Route) -> EpisodeSettings:
    """The service's episode settings with what this task sets, and its route's version and served name."""
    updates: dict[str, Any] = {}
    if request.max_steps:
        updates["max_steps"] = request.max_steps
    if request.timeout_s:
        updates["timeout_s"] = request.timeout_s
    if route.served_name:
        updates["model"] = route.served_name
    if route.version:
        updates["version"] = route.version
    if request.sampling:
        updates["sampling"] = request.sampling
    return defaults.model_copy(update=updates)


def focus_probe(device: Device) -> Callable[[], Awaitable[str]]:
    """Asks the phone whether its focused field is a password ("password", "other", or why it
    cannot tell)."""
    return partial(focus_of, device)


def _step_logger(events: EventHub) -> Callable[[Episode, Step], Awaitable[None]]:
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
        events.publish(ep.id, {"event": "step", "step": step})

    return on_step


async def run_task_episode(
    episode: Episode,
    request: TaskRequest,
    route: Route,
    device: Device,
    *,
    policy: Policy,
    store: TrajectoryStore,
    settings: EpisodeSettings,
    takeover: Takeover,
    events: EventHub,
    cancel: asyncio.Event,
) -> None:
    """Run the task's episode to its end on its route (version, engine, prompt: ``policy`` is the
    route's engine); never raises (a crash ends the task as an error)."""
    try:
        runner = EpisodeRunner(
            policy,
            device,
            store,
            episode_settings(settings, request, route),
            route.prompt,
            reviewer=takeover,
            on_step=_step_logger(events),
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
                "device": device.serial,
            },
        )
        events.publish(final.id, end_event(final))
    except Exception:
        log.exception("episode %s crashed", episode.id)
        crashed = await asyncio.to_thread(store.get, episode.id)
        await asyncio.to_thread(
            store.save_episode,
            crashed.model_copy(
                update={"status": EpisodeStatus.ERROR, "finished_at": utcnow(), "error": "internal error"}
            ),
        )
        events.publish(episode.id, {"event": "end", "status": "error", "error": "internal error"})
