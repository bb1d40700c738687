"""``/v1/trajectories``: an episode with its steps, and interchange JSONL exports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse

from agent.interchange import episode_to_record
from agent.store import EpisodeQuery
from agent.trajectory import EpisodeStatus
from serve.api.deps import AgentKey, StateDep
from serve.api.schemas import StepResponse, TaskResponse, TrajectoryResponse
from serve.api.validation import StrictJsonRoute

router = APIRouter(prefix="/v1/trajectories", tags=["trajectories"], route_class=StrictJsonRoute)


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}, "description": "Interchange JSONL."}},
)
async def export(
    state: StateDep,
    key: AgentKey,
    status_: Annotated[EpisodeStatus | None, Query(alias="status")] = None,
    device: Annotated[str | None, Query(max_length=128)] = None,
    model_version: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> StreamingResponse:
    """Episodes as UI-S1 interchange JSONL; screenshot paths point at ``/v1/screenshots``."""
    query = EpisodeQuery(status=status_, device_serial=device, model_version=model_version, limit=limit)
    episodes = await asyncio.to_thread(state.store.query, query)

    def lines() -> Iterator[str]:
        for episode in episodes:
            steps = [
                s.model_copy(
                    update={
                        "screenshot": s.screenshot.model_copy(
                            update={"uri": f"/v1/screenshots/{s.screenshot.sha256}"}
                        )
                    }
                )
                if s.screenshot.sha256
                else s
                for s in episode.steps
            ]
            yield (
                json.dumps(episode_to_record(episode.model_copy(update={"steps": steps})), ensure_ascii=False)
                + "\n"
            )

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.get("/{episode_id}", response_model=TrajectoryResponse)
async def get_trajectory(episode_id: str, state: StateDep, key: AgentKey) -> TrajectoryResponse:
    try:
        episode = await asyncio.to_thread(state.store.get, episode_id)
    except KeyError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no episode {episode_id}") from None
    return TrajectoryResponse(
        task=TaskResponse.of(
            episode,
            paused=episode.status is EpisodeStatus.RUNNING
            and await state.runner.controls.is_paused(episode.id),
        ),
        steps=[StepResponse.of(s) for s in episode.steps],
    )
