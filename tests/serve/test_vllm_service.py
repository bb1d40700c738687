"""The service with its own vLLM backend: the tiny model behind the real vLLM CPU server.

The app builds its policy from settings (``UIS1_POLICY__*``) as in production; tasks run on
simulated phones behind the real adb server. The tiny model has random weights, so its answers do
not parse: the test pins that every step is recorded with the server's raw text and the model
version, that the task ends with the reason, and that readiness and metrics see the server.
"""

from __future__ import annotations

import asyncio
import base64
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.geometry import ResizeSettings, Size, smart_resize
from agent.vllm_policy import VllmSettings
from tests.conftest import vllm_server
from tests.serve.test_api import wait_finished

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]  # a vLLM server per module


@pytest.fixture(scope="module")
def vllm(tiny_model_dir: Path) -> Iterator[dict[str, Any]]:
    with vllm_server(tiny_model_dir) as server:
        yield server


def test_a_task_runs_on_the_real_vllm_server_and_every_step_is_recorded(
    make_service, vllm, tiny_model_dir
) -> None:  # type: ignore[no-untyped-def]
    from agent.checkpoint import load_processor, vision_token_ids

    suppress = tuple(vision_token_ids(load_processor(tiny_model_dir).tokenizer))
    policy = VllmSettings(base_url=vllm["base_url"], model=vllm["model"], suppress_token_ids=suppress)
    service = make_service(own_policy=True, policy=policy, resize=ResizeSettings(max_pixels=64 * 28 * 28))
    client = service.client(service.agent)

    ready = service.client().get("/readyz").json()
    assert ready["checks"]["policy"] is True

    task_id = client.post(
        "/v1/tasks", json={"goal": "Turn on Wi-Fi", "max_steps": 2, "sampling": {"max_tokens": 16}}
    ).json()["id"]
    from serve.api.client import AgentClient
    from serve.api.schemas import StepResponse

    steps: list[dict[str, Any]] = []
    end: dict[str, Any] = {}
    with AgentClient(service.url, service.agent) as typed:
        for kind, payload in typed.events(task_id):
            if isinstance(payload, StepResponse):
                steps.append(payload.model_dump())
            elif kind == "end":
                end = payload
    task = wait_finished(client, task_id)
    assert task["model_version"] in (None, vllm["model"])
    assert steps, "no step was streamed"
    assert all(s["raw_response"] and s["model_version"] == vllm["model"] for s in steps)
    assert all(s["parse_error"] for s in steps)  # random weights never write a valid action
    assert end["status"] == task["status"] == "failed"
    assert end["error"] == task["error"] == "step budget of 2 used up"  # parse errors under the retry limit
    recorded = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
    assert [s["raw_response"] for s in recorded] == [s["raw_response"] for s in steps]

    metrics = client.get("/metrics").text
    assert 'uis1_parse_errors_total{reason="' in metrics
    assert 'uis1_step_seconds_count{phase="policy"}' in metrics
    assert vllm["base_url"] not in metrics  # the engine's address is not the clients' business
    relayed = client.get("/metrics/vllm")
    assert relayed.status_code == 200, relayed.text
    assert "vllm:num_requests_running" in relayed.text  # the engine's own metrics, through the service
    from tests.deploy.test_deploy import dashboard_metrics

    for name in sorted(m for m in dashboard_metrics() if m.startswith("vllm:")):  # the dashboard's queries
        assert re.search(rf"^{re.escape(name)}[{{ ]", relayed.text, re.MULTILINE), name
    assert service.client().get("/metrics/vllm").status_code == 401


def test_predict_goes_through_the_real_vllm_server(make_service, vllm) -> None:  # type: ignore[no-untyped-def]
    policy = VllmSettings(base_url=vllm["base_url"], model=vllm["model"])
    service = make_service(own_policy=True, policy=policy, resize=ResizeSettings(max_pixels=64 * 28 * 28))
    buffer = io.BytesIO()
    Image.new("RGB", (540, 1200), (30, 120, 200)).save(buffer, "PNG")
    body = {
        "goal": "Open Clock",
        "screenshots": [base64.b64encode(buffer.getvalue()).decode()],
        "sampling": {"max_tokens": 8},
    }
    response = service.client(service.agent).post("/v1/predict", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["raw"]
    assert result["parse_error"]  # random weights
    resized = smart_resize(Size(540, 1200), ResizeSettings(max_pixels=64 * 28 * 28))
    assert result["resized"] == [resized.width, resized.height]
    assert result["model_version"] == vllm["model"]


def test_images_go_as_captured_once_the_servers_processor_is_checked_to_resize_alike(  # type: ignore[no-untyped-def]
    make_service, vllm
) -> None:
    from agent.policy import PolicyUnavailable
    from agent.vllm_policy import VllmPolicy
    from devices.ports import free_port

    async def mismatch(base_url: str, resize: ResizeSettings) -> str | None:
        probe = VllmPolicy(VllmSettings(base_url=base_url, model=vllm["model"]))
        try:
            return await probe.image_sizing_mismatch(resize, timeout_s=60)
        finally:
            await probe.aclose()

    served = ResizeSettings(max_pixels=64 * 28 * 28)  # what the tiny model's processor config says
    assert asyncio.run(mismatch(vllm["base_url"], served)) is None
    different = asyncio.run(mismatch(vllm["base_url"], ResizeSettings()))  # the 7B's default limits
    assert different is not None
    assert "UIS1_RESIZE__" in different
    assert asyncio.run(
        mismatch(vllm["base_url"], ResizeSettings(max_pixels=64 * 28 * 28, min_pixels=16 * 28 * 28))
    )
    with pytest.raises(PolicyUnavailable):
        asyncio.run(mismatch(f"http://127.0.0.1:{free_port()}", served))

    # The service: resized until the check passes, then the captured PNG goes as is.
    policy = VllmSettings(base_url=vllm["base_url"], model=vllm["model"])
    service = make_service(own_policy=True, policy=policy, resize=served)
    checked = images_once_checked(service)
    assert checked["transport"] == "original"
    mismatched = images_once_checked(make_service(own_policy=True, policy=policy, resize=ResizeSettings()))
    assert mismatched["transport"] == "resized"
    assert "UIS1_RESIZE__" in mismatched["why"]


def images_once_checked(service: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while (images := service.client().get("/readyz").json()["images"])["why"] is None:
        assert time.monotonic() < deadline, "the image check never answered"
        time.sleep(0.2)
    return images  # type: ignore[no-any-return]
