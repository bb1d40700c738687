"""A typed Python client of the API (synchronous, httpx), used by the demo and the tests.

client = AgentClient("http://127.0.0.1:8080", key)
task = client.create_task("Turn on Wi-Fi")
for event, data in client.events(task.id):
    ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import connect_sse

from serve.api.schemas import (
    DeviceResponse,
    FeedbackResponse,
    StepResponse,
    TaskList,
    TaskResponse,
    TrajectoryResponse,
)


class ApiError(RuntimeError):
    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class AgentClient:
    def __init__(self, base_url: str, key: str, *, timeout: float = 30.0) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        response = self._http.request(method, path, **kw)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text
            raise ApiError(response.status_code, detail)
        return response.json()

    def create_task(self, goal: str, **options: Any) -> TaskResponse:
        """Options: device ({serial, model, labels}), max_steps, timeout_s, model, sampling, idempotency_key,
        paused (held before the first action)."""
        return TaskResponse.model_validate(self._json("POST", "/v1/tasks", json={"goal": goal, **options}))

    def task(self, task_id: str) -> TaskResponse:
        return TaskResponse.model_validate(self._json("GET", f"/v1/tasks/{task_id}"))

    def tasks(self, **filters: Any) -> TaskList:
        return TaskList.model_validate(self._json("GET", "/v1/tasks", params=filters))

    def cancel(self, task_id: str) -> TaskResponse:
        return TaskResponse.model_validate(self._json("POST", f"/v1/tasks/{task_id}/cancel"))

    def feedback(
        self, task_id: str, outcome: str, comment: str | None = None, *, source: str = "client"
    ) -> FeedbackResponse:
        """``source``: ``client`` (a person judged) or ``checker`` (a program checked the device)."""
        body = {"outcome": outcome, "comment": comment, "source": source}
        return FeedbackResponse.model_validate(self._json("POST", f"/v1/tasks/{task_id}/feedback", json=body))

    def pause(self, task_id: str) -> TaskResponse:
        return TaskResponse.model_validate(self._json("POST", f"/v1/tasks/{task_id}/pause"))

    def take_over(self, task_id: str, action: dict[str, Any], *, hold: bool = False) -> TaskResponse:
        """Supply the held step's action (device pixels); ``hold``: hold again before the next one."""
        body = {"action": action, "hold": hold}
        return TaskResponse.model_validate(self._json("POST", f"/v1/tasks/{task_id}/takeover", json=body))

    def resume(self, task_id: str, *, hold: bool = False) -> TaskResponse:
        """Let the held step go on with the policy's action; ``hold``: for this step only."""
        body = {"hold": True} if hold else None
        return TaskResponse.model_validate(self._json("POST", f"/v1/tasks/{task_id}/resume", json=body))

    def events(self, task_id: str) -> Iterator[tuple[str, StepResponse | dict[str, Any]]]:
        """The task's server-sent events until it ends: ("step", StepResponse), ("held", {"index",
        "reason", "proposed_action"}: a step waits for the client, also sent on connecting when one
        does), ("paused", {}), ("resumed", {}), ("taken_over", {"action": ...}) and ("end", {...}). A step comes again when
        it changes (``revision`` 0: recorded, 1: final): keep the highest revision of each index."""
        with connect_sse(self._http, "GET", f"/v1/tasks/{task_id}/events", timeout=None) as source:
            if source.response.status_code >= 400:
                source.response.read()
                raise ApiError(source.response.status_code, source.response.text)
            for event in source.iter_sse():
                if not event.data:  # a keep-alive comment (": ping") while nothing happens
                    continue
                data = event.json()
                if event.event == "step":
                    yield event.event, StepResponse.model_validate(data)
                else:
                    yield event.event, data
                if event.event == "end":
                    return

    def trajectory(self, task_id: str) -> TrajectoryResponse:
        return TrajectoryResponse.model_validate(self._json("GET", f"/v1/trajectories/{task_id}"))

    def devices(self) -> list[DeviceResponse]:
        return [DeviceResponse.model_validate(d) for d in self._json("GET", "/v1/devices")]

    def predict(
        self, goal: str, screenshots: list[str], history: list[str] | None = None, **options: Any
    ) -> dict[str, Any]:
        body = {"goal": goal, "screenshots": screenshots, "history": history or [], **options}
        return dict(self._json("POST", "/v1/predict", json=body))

    def models(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v1/models"))

    def model(self, name: str) -> dict[str, Any]:
        """One version with its info (training, evaluation, gate decision) and events."""
        return dict(self._json("GET", f"/v1/models/{name}"))

    def register_model(self, name: str, **fields: Any) -> dict[str, Any]:
        """Admin: register a version (served_name, base, adapter, kind, parent, info)."""
        return dict(self._json("POST", "/v1/models", json={"name": name, **fields}))

    def promote(self, version: str, *, reason: str | None = None, force: bool = False) -> dict[str, Any]:
        """Admin: gate (unless ``force``) and promote a version, swapping it in where a swap is set up."""
        body = {"version": version, "reason": reason, "force": force}
        return dict(self._json("POST", "/v1/models/promote", json=body))

    def start_job(self, kind: str = "retrain") -> dict[str, Any]:
        """Admin: run a retraining job now."""
        return dict(self._json("POST", "/v1/jobs", json={"kind": kind}))

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self._json("GET", f"/v1/jobs/{job_id}"))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
