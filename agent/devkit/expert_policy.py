"""``ExpertPolicy``: a simulated task's expert solver behind the ``Policy`` interface.

It answers like UI-S1 would (``<think>`` + ``<action>`` in resized-image pixels), choosing each
action by looking at the simulated phone after the previous one ran. It is the oracle of the
online benchmark, the source of expert trajectories on the simulated phone, and a policy that
always completes its task, for demos and tests of everything around the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from agent.actions import action_from_dict
from agent.execution import from_device_action
from agent.parsing import format_response
from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import Turn, current_geometry
from devices.sim.phone import SimPhone
from devices.sim.tasks import ExpertAction, Task


class ExpertPolicy:
    def __init__(self, task: Task, phone: SimPhone, *, model_version: str = "expert") -> None:
        self.task = task
        self.phone = phone
        self._version = model_version
        self._actions: Iterator[ExpertAction] | None = None

    @property
    def model_version(self) -> str:
        return self._version

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        if self._actions is None:
            self._actions = self.task.solve(self.phone)
        expert = next(self._actions, ExpertAction("terminate", status="success"))
        device_action = action_from_dict(expert.to_dict())
        action = from_device_action(device_action, current_geometry(turns))
        raw = format_response(action, think=f"Expert step towards: {self.task.goal}")
        return PolicyResult.from_text(raw, model_version=self._version, prompt_tokens=0, completion_tokens=0)

    async def aclose(self) -> None:
        return None
