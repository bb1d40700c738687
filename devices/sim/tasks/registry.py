"""The one registry every task class is listed in."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from devices.sim.tasks.base import Task

TASKS: dict[str, type[Task]] = {}
T = TypeVar("T", bound="type[Task]")


def register(cls: T) -> T:
    if cls.name in TASKS:
        raise ValueError(f"task {cls.name!r} registered twice")
    TASKS[cls.name] = cls
    return cls
