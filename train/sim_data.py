"""Expert trajectories from the simulated phone: each task's own solver run on an in-process phone,
what it saw (screenshots) and did (labels with target bounds), with a short templated thought."""

from __future__ import annotations

from typing import Any

from agent.geometry import Size
from agent.trajectory import ActionLabel
from train.data import DataError, ExpertStep, ExpertTrajectory, SimSource
from train.data import sha256_hex as sha


def load_sim(src: SimSource) -> list[ExpertTrajectory]:
    """Run each task's expert on an in-process simulated phone, recording what it saw and did."""
    from devices.sim.display import profile
    from devices.sim.phone import SimPhone
    from devices.sim.tasks import TASKS, Outcome
    from devices.sim.tasks.base import execute

    names = src.tasks or sorted(TASKS)
    unknown = sorted(set(names) - set(TASKS))
    if unknown:
        raise DataError(f"unknown simulated tasks: {', '.join(unknown)}")
    phone = SimPhone(
        "sim-data", width=src.width, height=src.height, clock="09:41", display=profile(src.display)
    )
    out = []
    for name in names:
        for seed in src.seeds:
            task = TASKS[name].create(seed)
            task.initialize(phone)
            outcome = Outcome()
            steps = []
            for action in task.solve(phone):
                png = phone.screenshot_png()
                label = ActionLabel.model_validate(
                    {**action.to_dict(), **({"bbox": action.bbox} if action.bbox else {})}
                )
                size = Size(phone.width, phone.height)
                thought = sim_thought(task.goal, action)
                steps.append(
                    ExpertStep(label, size, png=png, sha256=sha(png), thought=thought, convention="finger")
                )
                execute(phone, action, outcome)
            if not steps or steps[-1].expert.action != "terminate":  # solvers usually end with it themselves
                png = phone.screenshot_png()
                done = ActionLabel(action="terminate", status="success")
                thought = f"The goal is: {task.goal}. It is done, so I finish."
                steps.append(
                    ExpertStep(
                        done, Size(phone.width, phone.height), png=png, sha256=sha(png), thought=thought
                    )
                )
            if not task.is_successful(phone, outcome):
                raise DataError(f"the expert of {name} (seed {seed}) did not complete its task")
            out.append(
                ExpertTrajectory(task.goal, tuple(steps), f"sim:{name}:{seed}", swipe_convention="finger")
            )
    return out


def sim_thought(goal: str, action: Any) -> str:
    """A short, templated reasoning for a simulated expert step (the data's stored thought)."""
    what = {
        "click": f"tap {action.target!r}" if action.target else "tap the next control",
        "long_press": "press and hold the item",
        "swipe": "scroll to see more",
        "type": f"type {action.text!r}",
        "system_button": f"press {action.button}",
        "open": f"open the {action.text} app",
        "wait": "wait for the screen to update",
        "answer": f"answer {action.text!r}",
        "key": f"press the {action.text} key",
        "terminate": "finish, since it is done",
    }.get(action.action, action.action)
    return f"The goal is: {goal}. Next I {what}."
