"""The policy client against a GPU vLLM server serving UI-S1-7B: run by operators on their hardware.

    UIS1_TEST_GPU=1 UIS1_TEST_VLLM_URL=http://gpu-host:8000 UIS1_TEST_VLLM_MODEL=ui-s1-7b \\
        .venv/bin/pytest -m gpu tests/agent

The server is the one deploy/README.md starts ("Serving UI-S1-7B with vLLM"). The tests send a
simulated phone's screens, as the service does, and check that the model answers in the UI-S1
action space, that concurrent requests are served, and that the server's limits are met.
"""

from __future__ import annotations

import asyncio
import io
import os

import pytest
from PIL import Image

from agent.policy import PolicyRejected, SamplingSettings
from agent.prompt import PromptSettings, build_conversation
from agent.vllm_policy import VllmPolicy, VllmSettings
from devices.sim.phone import SimPhone

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]
GREEDY = SamplingSettings(temperature=0.0, max_tokens=512)


@pytest.fixture(scope="module")
def settings() -> VllmSettings:
    url = os.environ.get("UIS1_TEST_VLLM_URL")
    if not url:
        pytest.fail("set UIS1_TEST_VLLM_URL to the vLLM server (and UIS1_TEST_VLLM_MODEL to its served name)")
    return VllmSettings(
        base_url=url,
        model=os.environ.get("UIS1_TEST_VLLM_MODEL", "ui-s1-7b"),
        api_key=os.environ.get("UIS1_TEST_VLLM_API_KEY"),
    )


def _turns(goal: str = "Turn on Wi-Fi") -> list:  # type: ignore[type-arg]
    phone = SimPhone("gpu-check")
    phone.start("com.android.settings")
    screen = Image.open(io.BytesIO(phone.screenshot_png()))
    return build_conversation(goal, [screen], [], PromptSettings())


def test_the_server_is_healthy_and_serves_the_model(settings: VllmSettings) -> None:
    async def check() -> tuple[bool, list[str]]:
        policy = VllmPolicy(settings)
        try:
            return await policy.health(), await policy.served_models()
        finally:
            await policy.aclose()

    healthy, models = asyncio.run(check())
    assert healthy
    assert settings.model in models


def test_the_model_answers_in_the_action_space(settings: VllmSettings) -> None:
    async def ask() -> object:
        policy = VllmPolicy(settings)
        try:
            return await policy.predict(_turns(), sampling=GREEDY)
        finally:
            await policy.aclose()

    result = asyncio.run(ask())
    assert result.parsed.action is not None, f"no valid action in: {result.raw[:300]}"  # type: ignore[attr-defined]
    assert result.parsed.think  # type: ignore[attr-defined]


def test_concurrent_requests_are_all_served(settings: VllmSettings) -> None:
    async def many() -> list[object]:
        policy = VllmPolicy(settings)
        try:
            return list(await asyncio.gather(*(policy.predict(_turns(), sampling=GREEDY) for _ in range(16))))
        finally:
            await policy.aclose()

    results = asyncio.run(many())
    assert all(r.parsed.action is not None for r in results)  # type: ignore[attr-defined]


def test_an_unknown_model_is_rejected_not_retried(settings: VllmSettings) -> None:
    async def unknown() -> None:
        policy = VllmPolicy(settings)
        try:
            await policy.predict(_turns(), sampling=GREEDY, model="no-such-model")
        finally:
            await policy.aclose()

    with pytest.raises(PolicyRejected):
        asyncio.run(unknown())
