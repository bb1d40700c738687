"""``/v1/tasks``: submit, read, list, cancel, stream and give feedback on phone tasks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Response, status
from fastapi.sse import EventSourceResponse, ServerSentEvent

from agent.actions import ActionError, action_from_dict
from agent.store import EpisodeQuery
from agent.trajectory import Episode, EpisodeStatus
from serve.api.auth import Scope
from serve.api.deps import AgentKey, StateDep
from serve.api.schemas import (
    FeedbackRequest,
    FeedbackResponse,
    ResumeRequest,
    StepResponse,
    TakeoverRequest,
    TaskList,
    TaskResponse,
)
from serve.api.validation import StrictJsonRoute
from serve.models.routing import UnknownModel
from serve.tasks.errors import NoSuchDevice, NotRunning, OffScreen, QueueFull
from serve.tasks.request import TaskRequest

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/tasks", tags=["tasks"], route_class=StrictJsonRoute)


async def _episode(state: StateDep, task_id: str) -> Episode:
    try:
        return await asyncio.to_thread(state.store.get, task_id)
    except KeyError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}") from None


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TaskResponse,
    responses={
        200: {"model": TaskResponse, "description": "An earlier task with the same idempotency key."},
        429: {"description": "The queue is full; retry after the Retry-After seconds."},
    },
)
async def create_task(
    request: TaskRequest, state: StateDep, key: AgentKey, response: Response
) -> TaskResponse:
    try:
        episode, created = await state.runner.submit(request, submitted_by=key.id)
    except (UnknownModel, NoSuchDevice) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    except QueueFull as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            "the task queue is full",
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from None
    if not created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/v1/tasks/{episode.id}"
    return TaskResponse.of(episode)


@router.get("", response_model=TaskList)
async def list_tasks(
    state: StateDep,
    key: AgentKey,
    status_: Annotated[EpisodeStatus | None, Query(alias="status")] = None,
    device: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> TaskList:
    query = EpisodeQuery(status=status_, device_serial=device, limit=limit, offset=offset)
    episodes = await asyncio.to_thread(state.store.query, query)
    return TaskList(tasks=[TaskResponse.of(e) for e in episodes], limit=limit, offset=offset)


async def _task(state: StateDep, episode: Episode) -> TaskResponse:
    paused = episode.status is EpisodeStatus.RUNNING and await state.runner.controls.is_paused(episode.id)
    return TaskResponse.of(
        episode, paused=paused, held=state.runner.controls.held(episode.id) if paused else None
    )


@router.get("/{task_id}", response_model=TaskResponse)
async def get_task(task_id: str, state: StateDep, key: AgentKey) -> TaskResponse:
    return await _task(state, await _episode(state, task_id))


@router.delete(
    "/{task_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={
        403: {"description": "Neither an admin key nor the key that submitted the task."},
        404: {"description": "No such task (or deleted already)."},
        409: {"description": "The task has not finished: cancel it first."},
    },
)
async def delete_task(
    task_id: str,
    state: StateDep,
    key: AgentKey,
    reason: Annotated[str | None, Query(max_length=256, description="Why (kept with the deletion)")] = None,
) -> Response:
    """Delete a finished task: its steps, labels, screenshots no other task shows, and with them
    its events. Later exports and curations never see it; the deletion itself is recorded (which
    key, when, why). An admin key may delete any task, an agent key the tasks it submitted."""
    episode = await _episode(state, task_id)
    if not key.allows(Scope.ADMIN) and episode.labels.get("submitted_by") != key.id:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "only an admin key or the key that submitted the task may delete it"
        )
    if not episode.status.finished:
        raise HTTPException(status.HTTP_409_CONFLICT, "the task has not finished: cancel it first")
    by = f"key {key.name} ({key.id})"
    if not await asyncio.to_thread(state.store.delete_episode, task_id, by=by, reason=reason):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    log.info("task deleted", extra={"task_id": task_id, "by": by, "reason": reason})
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{task_id}/cancel", response_model=TaskResponse)
async def cancel_task(task_id: str, state: StateDep, key: AgentKey) -> TaskResponse:
    await _episode(state, task_id)
    return TaskResponse.of(await state.runner.controls.cancel(task_id))


async def _streamable(task_id: str, state: StateDep, key: AgentKey) -> str:
    """The task exists (checked before the stream starts, so an unknown one is a plain 404)."""
    await _episode(state, task_id)
    return task_id


@router.get(
    "/{task_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "Server-sent events: step (sent again when it changes; "
            "keep the highest revision of each index), held (a step waits for the client: index, "
            "reason (null when a person paused the task), proposed_action; sent on connecting too, "
            "when one waits then), approval (a rule held a step: index, reason, proposed_action), "
            "paused, resumed, taken_over, end."
        }
    },
)
async def stream_task(
    task_id: Annotated[str, Depends(_streamable)], state: StateDep
) -> AsyncIterator[ServerSentEvent]:
    controls = state.runner.controls
    async for item in state.runner.events.stream(task_id, held=lambda: controls.held_event(task_id)):
        if item["event"] == "step":
            step = StepResponse.of(item["step"])
            yield ServerSentEvent(
                event="step", id=f"{step.index}.{step.revision}", raw_data=step.model_dump_json()
            )
        else:
            payload = {k: v for k, v in item.items() if k != "event"}
            yield ServerSentEvent(event=item["event"], raw_data=json.dumps(payload))


@router.post(
    "/{task_id}/pause", response_model=TaskResponse, responses={409: {"description": "Not running."}}
)
async def pause_task(task_id: str, state: StateDep, key: AgentKey) -> TaskResponse:
    """Hold the task before its next action, so a person can supply that action (takeover)."""
    await _episode(state, task_id)
    try:
        await state.runner.controls.pause(task_id)
    except NotRunning:
        raise HTTPException(status.HTTP_409_CONFLICT, "only a running task can be paused") from None
    return await _task(state, await _episode(state, task_id))


@router.post(
    "/{task_id}/takeover",
    response_model=TaskResponse,
    responses={409: {"description": "The task is not paused."}},
)
async def take_over(task_id: str, body: TakeoverRequest, state: StateDep, key: AgentKey) -> TaskResponse:
    """Supply the action of the held step (device pixels) and resume; it is recorded as expert-provided.

    With ``hold``, the task is held again before the next action: a person drives it step by step."""
    await _episode(state, task_id)
    try:
        action = action_from_dict(body.action)
    except ActionError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"bad action: {exc.detail}") from None
    try:
        await state.runner.controls.take_over(task_id, action, hold=body.hold)
    except NotRunning as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except OffScreen as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"bad action: {exc}") from None
    return await _task(state, await _episode(state, task_id))


@router.post(
    "/{task_id}/resume", response_model=TaskResponse, responses={409: {"description": "Not running."}}
)
async def resume_task(
    task_id: str, state: StateDep, key: AgentKey, body: ResumeRequest | None = None
) -> TaskResponse:
    """Let a paused task go on with the policy's own action (with ``hold``, for one step only)."""
    await _episode(state, task_id)
    try:
        await state.runner.controls.resume(task_id, hold=body.hold if body else False)
    except NotRunning:
        raise HTTPException(status.HTTP_409_CONFLICT, "the task is not running") from None
    return await _task(state, await _episode(state, task_id))


@router.post("/{task_id}/feedback", response_model=FeedbackResponse)
async def give_feedback(
    task_id: str, body: FeedbackRequest, state: StateDep, key: AgentKey
) -> FeedbackResponse:
    episode = await _episode(state, task_id)
    if not episode.status.finished:
        raise HTTPException(status.HTTP_409_CONFLICT, "feedback is for finished tasks")
    labels = {**episode.labels, "feedback": body.outcome, "feedback_by": key.id, "label_source": body.source}
    if body.comment:
        labels["feedback_comment"] = body.comment[:256]
    matches = None
    if body.expected_answer is not None:
        given = (episode.answer or "").strip().lower()
        matches = bool(given) and body.expected_answer.strip().lower() in given
    updated = episode.model_copy(update={"labels": labels, "is_successful": body.outcome == "success"})
    await asyncio.to_thread(state.store.save_episode, updated)
    return FeedbackResponse(task=TaskResponse.of(updated), answer_matches=matches)
