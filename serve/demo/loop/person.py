"""The scripted person of the loop demo: a stand-in who knows how each simulated task is done (its
solver) and corrects the model through the API, with the calls the viewer's buttons make."""

from __future__ import annotations

import json
import time
from typing import Any


def agrees(proposed: dict[str, Any] | None, expert: Any) -> bool:
    """Whether the model's proposed action is the one the person would take: the same kind of action,
    on the same element (inside the expert target's bounds), with the same text, app or key."""
    if proposed is None or proposed.get("action") != expert.action:
        return False
    if expert.bbox is not None and "coordinate" in proposed:
        x, y = proposed["coordinate"]
        left, top, right, bottom = expert.bbox
        return bool(left <= x <= right and top <= y <= bottom)
    wanted = {k: v for k, v in expert.to_dict().items() if k != "coordinate"}
    return all(proposed.get(k) == v for k, v in wanted.items())


def brief(action: dict[str, Any] | None) -> str:
    if action is None:
        return "an answer that does not parse"
    detail = {k: v for k, v in action.items() if k != "action"}
    return f"{action['action']} {json.dumps(detail, separators=(',', ':'))}" if detail else action["action"]


def finished(client: Any, task_id: str) -> Any:
    """The task once it has ended: the wait ends on the task's event stream's ``end`` (which the
    service also sends on connecting to a task that has ended), not after a number of seconds. None
    if the stream broke off before the end (the caller says so instead of acting on a running task)."""
    for event, _ in _events(client, task_id):
        if event == "end":
            return client.task(task_id)
    return None


def held_at(client: Any, task_id: str, index: int) -> Any:
    """The task once step ``index`` waits for the person (its ``held`` event), or once it has ended.
    None if the stream broke off first."""
    for event, data in _events(client, task_id):
        if event == "end" or (event == "held" and data.get("index") == index):
            return client.task(task_id)
    return None


def run_checked(client: Any, tasks: list[Any], phones: list[Any], *, label: bool) -> list[tuple[str, bool]]:
    """Each task through the API on its own simulated phone, as many at once as there are phones,
    batch after batch; each checked on its phone once it has ended and, with ``label``, labelled by
    the checker (labelled traffic is what retraining learns from; a task whose stream broke off
    before its end is not labelled). Returns (task id, success) per task, in order."""
    from devices.sim.tasks import Outcome

    out: list[tuple[str, bool]] = []
    for i in range(0, len(tasks), len(phones)):
        batch = list(zip(tasks[i : i + len(phones)], phones, strict=False))
        submitted = []
        for task, device in batch:
            task.initialize(device.phone)
            submitted.append(client.create_task(task.goal, device={"serial": device.serial}).id)
        for task_id, (task, device) in zip(submitted, batch, strict=True):
            result = finished(client, task_id)
            ok = result is not None and task.is_successful(device.phone, Outcome(answer=result.answer))
            if label and result is not None:
                client.feedback(task_id, "success" if ok else "failure", source="checker")
            out.append((task_id, ok))
    return out


def correct_and_label(client: Any, task: Any, device: Any, say: Any) -> tuple[str, int, bool | None]:
    """``correct`` the task, then check it on the phone and label it as the person: the task's id,
    the steps corrected, and whether it was done (None: its stream broke off before the end, so
    it is not labelled)."""
    from devices.sim.tasks import Outcome

    task_id, corrected = correct(client, task, device, say)
    result = finished(client, task_id)
    if result is None:
        return task_id, corrected, None
    ok = bool(task.is_successful(device.phone, Outcome(answer=result.answer)))
    client.feedback(task_id, "success" if ok else "failure", comment="corrected by a person")
    return task_id, corrected, ok


def _events(client: Any, task_id: str) -> Any:
    """The task's events; a broken connection ends them (the caller then gives up and says so)."""
    import httpx

    try:
        yield from client.events(task_id)
    except httpx.TransportError:
        return


def poll(until: Any, timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := until()) is not None:
            return value
        time.sleep(every)
    return None


def correct(client: Any, task: Any, device: Any, say: Any) -> tuple[str, int]:
    """One failed task run again, held before every action: the model's action goes on while it is
    the one the person would take; from the first wrong one the person supplies each action (a
    takeover, as the viewer's buttons do). Returns the task's id and how many steps it corrected."""
    from devices.sim.tasks import ExpertAction

    task.initialize(device.phone)
    created = client.create_task(task.goal, device={"serial": device.serial}, paused=True)
    solver = task.solve(device.phone)
    taking_over = False
    corrected = 0
    say(f"  {task.goal}")
    while True:
        index = len(client.trajectory(created.id).steps)
        held = held_at(client, created.id, index)
        if held is None:
            say(f"    step {index + 1}: the task's event stream broke off; the person stops")
            return created.id, corrected
        if held.status.finished:
            return created.id, corrected
        expert = next(solver, ExpertAction("terminate", status="success"))
        proposed = held.held.proposed_action if held.held else None
        if not taking_over and agrees(proposed, expert):
            client.resume(created.id, hold=True)
            say(f"    step {index + 1}: the model's {brief(proposed)}: right, it goes on")
            continue
        taking_over = True
        corrected += 1
        client.take_over(created.id, expert.to_dict(), hold=expert.action not in ("terminate", "answer"))
        say(
            f"    step {index + 1}: the model wanted {brief(proposed)}; the person does {brief(expert.to_dict())}"
        )
