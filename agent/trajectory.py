"""Trajectory schema v1: the contract between serving, storage and training.

An ``Episode`` is one task run on a device; its ``Step``s are observe -> predict -> act cycles.
A step keeps everything training and debugging need: the screenshot (by reference and hash), the
size the model saw, the raw response, the parsed action or the parse error, the action as sent to
the device in device pixels, and timings split between policy and device. Expert labels
(imported datasets, human takeovers) sit beside what the policy said, in original pixels.

The schema is versioned (``schema_version``); readers refuse versions they do not know, and a
change to a field's meaning is a new version, never a silent edit.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.actions import ACTION_NAMES, Action
from agent.parsing import ParseError

SCHEMA_VERSION: Literal[1] = 1

Number = int | float
NonNegNumber = Annotated[Number, Field(ge=0, allow_inf_nan=False)]
# Element boxes can reach past the screen edge (partly scrolled-off views), so no sign bound.
FiniteNumber = Annotated[Number, Field(allow_inf_nan=False)]
Box = tuple[FiniteNumber, FiniteNumber, FiniteNumber, FiniteNumber]


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """A time read back from the database, with its zone: SQLite returns naive datetimes (UTC)."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class ImageSize(BaseModel):
    model_config = ConfigDict(frozen=True)

    width: Annotated[int, Field(gt=0)]
    height: Annotated[int, Field(gt=0)]


class SwipeDirection(StrEnum):
    UP = "up"
    DOWN = "down"
    LEFT = "left"
    RIGHT = "right"


class ActionLabel(BaseModel):
    """A trusted action in *original screenshot pixels*, as datasets write it.

    Unlike ``Action`` (what a policy says, integer pixels), a label keeps the dataset's numbers as
    they are (AndroidControl stores fractional pixels), the target element's ``bbox``, candidate
    boxes for matching, and a swipe's *scroll* ``direction`` where a dataset gives one. Keys this
    schema does not name are kept, so an import exports unchanged.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    action: str
    coordinate: tuple[NonNegNumber, NonNegNumber] | None = None
    coordinate2: tuple[NonNegNumber, NonNegNumber] | None = None
    text: str | None = None
    button: str | None = None
    time: NonNegNumber | None = None
    status: str | None = None
    bbox: Box | None = None
    candidate_bbox: list[Box] | None = None
    direction: SwipeDirection | None = None

    @field_validator("action")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in ACTION_NAMES:
            raise ValueError(f"unknown action {value!r}")
        return value

    def to_dict(self) -> dict[str, Any]:
        """The dataset form: unset fields left out, tuples as lists, extras kept."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_action(cls, action: Action) -> ActionLabel:
        return cls.model_validate(action.to_dict())


class StepSource(StrEnum):
    POLICY = "policy"  # the model chose the action
    HUMAN = "human"  # an operator took over this step
    EXPERT = "expert"  # imported from a dataset or produced by an expert solver


class StepTimings(BaseModel):
    model_config = ConfigDict(frozen=True)

    policy_s: Annotated[float, Field(ge=0)] | None = None
    device_s: Annotated[float, Field(ge=0)] | None = None


class ScreenshotRef(BaseModel):
    """Where a screenshot lives (a path or URI in the screenshot store) and its content hash."""

    model_config = ConfigDict(frozen=True)

    uri: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    size: ImageSize | None = None


class Step(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: Annotated[int, Field(ge=0)]
    screenshot: ScreenshotRef
    resized: ImageSize | None = None
    source: StepSource = StepSource.POLICY
    raw_response: str | None = None
    action: Action | None = None  # as parsed, in resized-image pixels
    parse_error: ParseError | None = None
    device_action: Action | None = None  # as executed, in device pixels
    expert: ActionLabel | None = None  # trusted label, original pixels
    check_options: ActionLabel | None = None  # evaluation targets (candidate boxes, scroll direction)
    thought: str | None = None
    motivation: str | None = None
    action_description: str | None = None
    step_instruction: str | None = None
    model_version: str | None = None
    timings: StepTimings = StepTimings()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None  # what went wrong executing the step (device gone, timeout)
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _action_xor_parse_error(self) -> Step:
        if self.action is not None and self.parse_error is not None:
            raise ValueError("a step has a parsed action or a parse error, not both")
        return self


class EpisodeStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # the policy terminated with success
    FAILED = "failed"  # terminated with failure, or ran out of steps
    CANCELLED = "cancelled"
    ERROR = "error"  # device or policy failure
    INTERRUPTED = "interrupted"  # the service stopped while it ran

    @property
    def finished(self) -> bool:
        return self not in (EpisodeStatus.PENDING, EpisodeStatus.RUNNING)


class DeviceRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    serial: str
    model: str | None = None


class Episode(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    id: str = Field(default_factory=new_id)
    external_id: int | str | None = None  # the id a dataset gave the episode
    goal: str
    device: DeviceRef | None = None
    screen: ImageSize | None = None
    model_version: str | None = None
    status: EpisodeStatus = EpisodeStatus.PENDING
    # Trusted outcome: from client feedback, a task checker, a judge or the dataset. None = unknown,
    # and unlabelled traffic is never used as expert data.
    is_successful: bool | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    answer: str | None = None  # what the policy answered, for questions
    error: str | None = None  # why the episode ended, when it did not succeed
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    steps: list[Step] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _steps_in_order(self) -> Episode:
        for expected, step in enumerate(self.steps):
            if step.index != expected:
                raise ValueError(f"step {expected} has index {step.index}")
        return self
