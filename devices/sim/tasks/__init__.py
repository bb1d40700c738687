"""Tasks for the simulated phone: importing this package registers all of them in ``TASKS``."""

from devices.sim.tasks import history, people, productivity, system, web
from devices.sim.tasks.base import ExpertAction, Outcome, Task, TaskError, execute, perform
from devices.sim.tasks.registry import TASKS

__all__ = [
    "TASKS",
    "ExpertAction",
    "Outcome",
    "Task",
    "TaskError",
    "execute",
    "history",
    "people",
    "perform",
    "productivity",
    "system",
    "web",
]
