"""Request and response bodies of the API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from agent.trajectory import Episode, EpisodeStatus, Step, StepSource
from serve.tasks.events import step_revision


class StepResponse(BaseModel):
    index: int
    source: str
    action: dict[str, Any] | None = Field(
        None, description="The model's action, in resized-screenshot pixels."
    )
    device_action: dict[str, Any] | None = Field(
        None, description="The action as executed, in device pixels."
    )
    thought: str | None = Field(None, description="The model's reasoning; none on a person's step.")
    raw_response: str | None = Field(
        None, description="The model's whole response (on a person's step: the one it replaced)."
    )
    parse_error: str | None = None
    error: str | None = None
    screenshot_url: str | None = None
    model_version: str | None = None
    policy_s: float | None = Field(
        None, description="Time the policy server took (the HTTP request); none on a person's step."
    )
    device_s: float | None = Field(None, description="Time the phone took (screenshot, action, settling).")
    started_at: datetime | None = None
    ended_at: datetime | None = Field(
        None,
        description="The rest of ended_at - started_at beyond policy_s and device_s is the service's own.",
    )
    review: dict[str, Any] | None = Field(
        None,
        description="A person's decision on this step when a rule asked for approval: reason and decision.",
    )
    secret: dict[str, Any] | None = Field(
        None,
        description="Set when the step typed into a password field (or where the phone could not tell): "
        "the text is masked everywhere the step is kept; its length and what the phone said of the field.",
    )
    revision: int = Field(
        1,
        description="0: recorded, its action not yet run; 1: final. The event stream sends a step again "
        "when it changes: keep the highest revision of each index.",
    )

    @classmethod
    def of(cls, step: Step) -> StepResponse:
        from agent.parsing import first_tag

        # A person's step: the thought and policy time were the model's, for the action it replaced
        # (still in raw_response and action); the step itself has neither.
        person = step.source is StepSource.HUMAN
        return cls(
            index=step.index,
            source=step.source.value,
            action=step.action.to_dict() if step.action else None,
            device_action=step.device_action.to_dict() if step.device_action else None,
            thought=None if person else first_tag(step.raw_response or "", "think"),
            raw_response=step.raw_response,
            parse_error=f"{step.parse_error.reason.value}: {step.parse_error.detail}"
            if step.parse_error
            else None,
            error=step.error,
            screenshot_url=f"/v1/screenshots/{step.screenshot.sha256}" if step.screenshot.sha256 else None,
            model_version=step.model_version,
            policy_s=None if person else step.timings.policy_s,
            device_s=step.timings.device_s,
            started_at=step.started_at,
            ended_at=step.ended_at,
            review=step.extra.get("review"),
            secret=step.extra.get("secret"),
            revision=step_revision(step),
        )


class HeldStep(BaseModel):
    index: int = Field(description="The step's index (from 0).")
    proposed_action: dict[str, Any] | None = Field(
        None, description="The policy's action for this step, in device pixels; a takeover replaces it."
    )
    raw_response: str = Field("", description="The policy's response, with its reasoning.")
    reason: str | None = Field(None, description="Why it waits: an approval rule's reason (None: a pause).")

    @classmethod
    def of(cls, held: tuple[Step, str | None]) -> HeldStep:
        step, reason = held
        proposed = step.device_action.to_dict() if step.device_action is not None else None
        return cls(index=step.index, proposed_action=proposed, raw_response=step.raw_response, reason=reason)


class TaskResponse(BaseModel):
    id: str
    goal: str
    status: EpisodeStatus
    device: str | None = None
    model_version: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    steps: int = 0
    error: str | None = None
    answer: str | None = None
    feedback: str | None = None
    paused: bool = Field(False, description="Held before its next action for a takeover.")
    held: HeldStep | None = Field(
        None, description="While paused: the step waiting for the client, when this replica runs the task."
    )
    events_url: str
    trajectory_url: str

    @classmethod
    def of(
        cls, episode: Episode, *, paused: bool = False, held: tuple[Step, str | None] | None = None
    ) -> TaskResponse:
        return cls(
            id=episode.id,
            goal=episode.goal,
            status=episode.status,
            device=episode.device.serial if episode.device else None,
            model_version=episode.model_version,
            created_at=episode.created_at,
            started_at=episode.started_at,
            finished_at=episode.finished_at,
            steps=len(episode.steps),
            error=episode.error,
            answer=episode.answer,
            feedback=episode.labels.get("feedback"),
            paused=paused,
            held=HeldStep.of(held) if held else None,
            events_url=f"/v1/tasks/{episode.id}/events",
            trajectory_url=f"/v1/trajectories/{episode.id}",
        )


class TaskList(BaseModel):
    tasks: list[TaskResponse]
    limit: int
    offset: int


class TakeoverRequest(BaseModel):
    action: dict[str, Any] = Field(
        description='A UI-S1 action in device pixels, e.g. {"action": "click", "coordinate": [540, 1200]}.'
    )
    hold: bool = Field(False, description="Hold the task again before the action after this one.")


class ResumeRequest(BaseModel):
    hold: bool = Field(
        False, description="Let only this step go on with the policy's action; hold the task before the next."
    )


class TrajectoryResponse(BaseModel):
    task: TaskResponse
    steps: list[StepResponse]


class FeedbackRequest(BaseModel):
    outcome: Literal["success", "failure", "partial"]
    source: Literal["client", "checker"] = Field(
        "client", description="Who judged: a person (client), or a program that checked the device's state."
    )
    comment: str | None = Field(None, max_length=2000)
    expected_answer: str | None = Field(
        None, max_length=2000, description="Checked against the episode's answer."
    )


class FeedbackResponse(BaseModel):
    task: TaskResponse
    answer_matches: bool | None = None


class DeviceResponse(BaseModel):
    serial: str
    state: str
    model: str
    server: str
    labels: dict[str, str]
    leased_by: str | None = None


class ConnectRequest(BaseModel):
    address: str = Field(
        pattern=r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$", max_length=300, description="host:port of the device."
    )
    server: str | None = Field(
        None, max_length=300, description="host:port of one of the service's adb servers."
    )

    @field_validator("address")
    @classmethod
    def _port_in_range(cls, value: str) -> str:
        port = int(value.rsplit(":", 1)[1])
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is out of range")
        return value
