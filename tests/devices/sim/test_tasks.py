"""Every task: the expert solves it, and a wrong sequence does not; directly and over adb."""

from __future__ import annotations

import asyncio

import pytest

from devices.adb import AdbDriver, DriverSettings
from devices.sim.display import profile
from devices.sim.phone import SimPhone
from devices.sim.tasks import TASKS, Outcome, execute

NAMES = sorted(TASKS)


def test_there_are_at_least_30_tasks_from_one_to_ten_or_more_steps() -> None:
    assert len(TASKS) >= 30
    phone = SimPhone("t")
    lengths = [len(TASKS[n].create(0).run_expert(phone)[0]) for n in NAMES]
    assert min(lengths) <= 2
    assert max(lengths) >= 10
    apps = {app for cls in TASKS.values() for app in cls.apps}
    assert len(apps) >= 9


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("display", ["standard", "learnable"])
def test_the_expert_solves_the_task(name: str, seed: int, display: str) -> None:
    task = TASKS[name].create(seed)
    phone = SimPhone("t", display=profile(display))
    task.initialize(phone)
    assert not task.is_successful(phone, Outcome()), "already solved before any action"
    actions, outcome = task.run_expert(phone)
    assert task.is_successful(phone, outcome), [a.to_dict() for a in actions]
    assert actions[-1].to_dict() == {"action": "terminate", "status": "success"}
    assert all(
        set(a.to_dict()) <= {"action", "coordinate", "coordinate2", "text", "button", "time", "status"}
        for a in actions
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_sequence_missing_a_step_fails(name: str) -> None:
    task = TASKS[name].create(0)
    phone = SimPhone("t")
    actions, _ = task.run_expert(phone)
    # Drop the last real step (the one before terminate) and replay the rest.
    wrong = actions[:-2] + actions[-1:]
    task.initialize(phone)
    outcome = Outcome()
    for action in wrong:
        execute(phone, action, outcome)
    assert not task.is_successful(phone, outcome)


def test_goals_are_parameterised() -> None:
    goals = {TASKS["create_contact"].create(s).goal for s in range(10)}
    assert len(goals) > 3
    assert TASKS["wifi_on"].create(0).goal == "Turn on Wi-Fi"


@pytest.mark.timeout(300)
def test_every_task_is_solved_through_the_adb_driver(sim, fleet) -> None:  # type: ignore[no-untyped-def]
    driver = AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))

    async def solve_all() -> list[str]:
        failed = []
        for name in NAMES:
            task = TASKS[name].create(0)
            _, outcome = await task.run_expert_on(sim.phone, driver)
            if not task.is_successful(sim.phone, outcome):
                failed.append(name)
        return failed

    assert asyncio.run(solve_all()) == []
