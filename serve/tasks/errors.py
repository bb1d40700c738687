"""The ways the task runner and its controls say no (each maps to one HTTP status in the routes)."""

from __future__ import annotations


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
