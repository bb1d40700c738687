"""``/v1/jobs``: retraining jobs, their history and status; starting one by hand needs admin."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel

from agent.jobs import Job, JobError
from serve.api.deps import AdminKey, AgentKey, StateDep
from serve.api.validation import StrictJsonRoute

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=StrictJsonRoute)


class JobResponse(BaseModel):
    id: str
    kind: str
    status: str
    trigger: str
    slot: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    owner: str | None
    reason: str | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, job: Job) -> JobResponse:
        return cls(**job.__dict__)


class JobList(BaseModel):
    jobs: list[JobResponse]
    next_run: datetime | None = None  # the schedule's next fire time, when this replica runs it


class StartRequest(BaseModel):
    kind: Literal["retrain"] = "retrain"


@router.get("", response_model=JobList)
async def list_jobs(
    state: StateDep,
    key: AgentKey,
    limit: int = Query(50, ge=1, le=500),
    status_: str | None = Query(None, alias="status"),
) -> JobList:
    found = await asyncio.to_thread(state.jobs.list, None, status_, limit)
    upcoming = state.scheduler.next_fire() if state.settings.scheduler.enabled else None
    return JobList(jobs=[JobResponse.of(j) for j in found], next_run=upcoming)


@router.get("/{job_id}", response_model=JobResponse)
async def get_job(job_id: str, state: StateDep, key: AgentKey) -> JobResponse:
    try:
        return JobResponse.of(await asyncio.to_thread(state.jobs.get, job_id))
    except JobError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


@router.post("", response_model=JobResponse, status_code=status.HTTP_202_ACCEPTED)
async def start_job(body: StartRequest, state: StateDep, key: AdminKey) -> JobResponse:
    """Run a retraining job now (in a child process); it skips itself if another holds the lock."""
    if state.settings.scheduler.retrain_config is None:
        raise HTTPException(
            status.HTTP_409_CONFLICT, "no retraining config: set UIS1_SCHEDULER__RETRAIN_CONFIG"
        )
    job = await asyncio.to_thread(state.jobs.create, body.kind, trigger=f"api:{key.id}")
    assert job is not None
    state.scheduler.start(job)
    return JobResponse.of(job)
