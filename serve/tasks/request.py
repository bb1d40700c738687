"""What a client asks of the task runner: the goal, the phone, the limits, the model."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from agent.policy import SamplingSettings
from serve.tasks.takeover import Approval

# A selector names a phone, not a document: a pool's labels are a handful of short tags.
MAX_LABELS = 32
LabelKey = Annotated[str, Field(min_length=1, max_length=64)]
LabelValue = Annotated[str, Field(max_length=256)]


class DeviceSelector(BaseModel):
    model_config = ConfigDict(extra="forbid")

    serial: str | None = Field(None, max_length=256)
    model: str | None = Field(None, max_length=256)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)


class TaskRequest(BaseModel):
    """What a client asks for. Unset limits take the service's defaults."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=2000)
    device: DeviceSelector = Field(default_factory=DeviceSelector)
    max_steps: int | None = Field(None, gt=0, le=200)
    timeout_s: float | None = Field(None, gt=0, le=24 * 3600)
    model: str | None = Field(None, max_length=256)  # a served model version or adapter name
    sampling: SamplingSettings | None = None
    idempotency_key: str | None = Field(None, max_length=128)
    paused: bool = Field(False, description="Start held before the first action (supervised from the start).")
    approval: Approval | None = Field(
        None, description="Actions that wait for a person (default: the service's)."
    )
