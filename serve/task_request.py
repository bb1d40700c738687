"""What a client asks of the task runner, and the ways the runner says no."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from agent.policy import SamplingSettings
from serve.takeover import Approval

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


class UnknownModel(LookupError):
    """A model name that no registered version or alias has, or a version no engine serves."""


class NoSuchDevice(LookupError):
    """No device the pool knows matches the task's selector: it would wait in the queue forever."""


class NotRunning(LookupError):
    """A control (pause, takeover, resume) for a task that is not running."""


class OffScreen(ValueError):
    """A takeover action that does not fit on the screen it would act on."""


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the task queue is full")
        self.retry_after_s = retry_after_s
