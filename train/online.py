"""Online evaluation: the policy runs whole tasks on simulated phones; each task's check decides.

The same path the service takes (the episode loop, the adb driver, a real adb server with the
simulated phones attached), on a private adb server port and a throwaway trajectory store, so it
runs anywhere the trainer runs. Every (task, seed) starts from the task's own initial state.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.policy import Policy, SamplingSettings
from agent.prompt import PromptSettings
from devices.ports import free_port


class OnlineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks: list[str] = Field(default_factory=lambda: ["wifi_on", "bluetooth_on", "airplane_mode_on"])
    seeds: list[int] = Field(default_factory=lambda: [0])
    held_out: int | None = Field(
        None,
        gt=0,
        description="Per task, run this many instances from the held-out side of its split "
        "(devices.sim.tasks.splits: none has a trained instance's goal and expert actions), from "
        "seed seeds[0] on, instead of the listed seeds",
    )
    max_steps: int = Field(12, gt=0)
    max_new_tokens: int = Field(512, gt=0)
    width: int = Field(1080, gt=0)
    height: int = Field(2400, gt=0)
    display: Literal["standard", "varied", "learnable"] = (
        "standard"  # the phone's display profile (devices.sim.display)
    )


def cases(settings: OnlineSettings) -> list[tuple[str, int]]:
    """The (task, seed) pairs an evaluation runs."""
    if settings.held_out is None:
        return [(name, seed) for name in settings.tasks for seed in settings.seeds]
    from devices.sim.tasks.splits import seeds

    start = settings.seeds[0] if settings.seeds else 0
    return [
        (name, seed)
        for name in settings.tasks
        for seed in seeds(name, "held_out", settings.held_out, start=start, display=settings.display)
    ]


def online_success(
    policy: Policy,
    settings: OnlineSettings,
    *,
    prompt: PromptSettings | None = None,
    work_dir: Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Success rate of ``policy`` over ``settings.tasks`` x ``settings.seeds`` (greedy decoding)."""
    with tempfile.TemporaryDirectory(prefix="uis1-online-", dir=work_dir) as tmp:
        return asyncio.run(_run(policy, settings, prompt or PromptSettings(), Path(tmp), progress))


async def _run(
    policy: Policy, settings: OnlineSettings, prompt: PromptSettings, tmp: Path, progress: bool
) -> dict[str, Any]:
    from agent.episode import EpisodeRunner, EpisodeSettings
    from agent.store import TrajectoryStore
    from devices.adb import AdbDriver, DriverSettings
    from devices.adb_server import AdbServer
    from devices.sim.display import profile
    from devices.sim.fleet import SimFleet
    from devices.sim.tasks import TASKS, Outcome
    from train.tracking import progress_iter

    unknown = sorted(set(settings.tasks) - set(TASKS))
    if unknown:
        raise ValueError(f"unknown simulated tasks: {', '.join(unknown)}")
    store = TrajectoryStore(f"sqlite:///{tmp / 'online.db'}", tmp / "screenshots")
    store.migrate()
    episode_settings = EpisodeSettings(
        max_steps=settings.max_steps,
        settle_s=0.05,  # a simulated phone applies an action at once
        sampling=SamplingSettings(temperature=0.0, max_tokens=settings.max_new_tokens),
        # A simulated phone's fields hold no one's secrets, and the policy is scored on the history
        # it wrote (a masked card number would be a history it never trained on).
        mask_secrets=False,
    )
    results = []
    try:
        with AdbServer(port=free_port()) as server, SimFleet(server) as fleet:
            device = fleet.add(
                "eval", width=settings.width, height=settings.height, display=profile(settings.display)
            )
            driver = AdbDriver(fleet.client(), device.serial, DriverSettings(use_uiautomator2=False))
            for name, seed in progress_iter(cases(settings), progress, "eval: online", "episode"):
                task = TASKS[name].create(seed)
                task.initialize(device.phone)
                runner = EpisodeRunner(policy, driver, store, episode_settings, prompt)
                episode = await runner.run(task.goal)
                ok = task.is_successful(device.phone, Outcome(answer=episode.answer))
                results.append(
                    {
                        "task": name,
                        "seed": seed,
                        "success": ok,
                        "steps": len(episode.steps),
                        "status": episode.status.value,
                        "error": episode.error,
                    }
                )
    finally:
        store.engine.dispose()
    done = sum(1 for r in results if r["success"])
    return {"success_rate": done / len(results) if results else 0.0, "episodes": results}
