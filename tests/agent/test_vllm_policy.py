"""The vLLM backend against a real vLLM server (its CPU build) serving the tiny model.

The server starts once for this module (about a minute) and is killed by the last test, to see
the client and the episode loop cope with a policy server that dies.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.checkpoint import vision_token_ids
from agent.geometry import ResizeSettings
from agent.policy import PolicyRejected, PolicyUnavailable, SamplingSettings
from agent.prompt import PromptSettings, Screenshot, build_conversation
from agent.vllm_policy import VllmPolicy, VllmSettings
from tests.conftest import vllm_server

PROMPT = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))
SAMPLING = SamplingSettings(max_tokens=24)

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # a vLLM server per module


@pytest.fixture(scope="module")
def vllm(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    with vllm_server(tiny_model_dir) as server:
        yield server


def _turns(shade: int = 30):  # type: ignore[no-untyped-def]
    shot = Screenshot.from_image(Image.new("RGB", (360, 800), (200, shade, 30)))
    return build_conversation("Open Clock", [shot], [], PROMPT)


def _policy(vllm, local, **kw) -> VllmPolicy:  # type: ignore[no-untyped-def]
    settings = VllmSettings(
        base_url=vllm["base_url"],
        model=vllm["model"],
        suppress_token_ids=tuple(vision_token_ids(local.processor.tokenizer)),
        **kw,
    )
    return VllmPolicy(settings, prompt=PROMPT, sampling=SAMPLING)


@pytest.fixture(scope="module")
def local(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from agent.local_policy import LocalPolicy

    return LocalPolicy(tiny_model_dir, prompt=PROMPT, sampling=SAMPLING)


def test_greedy_vllm_output_equals_the_local_backend(vllm, local) -> None:  # type: ignore[no-untyped-def]
    async def both() -> tuple[list[str], list[str], list[int]]:
        remote = _policy(vllm, local)
        try:
            turns = [_turns(s) for s in (10, 120, 240)]
            a = [await local.predict(t) for t in turns]
            b = [await remote.predict(t) for t in turns]
            return [r.raw for r in a], [r.raw for r in b], [r.prompt_tokens or 0 for r in b]
        finally:
            await remote.aclose()

    local_out, remote_out, prompt_tokens = asyncio.run(both())
    assert remote_out == local_out
    assert all(text for text in remote_out)
    assert prompt_tokens[0] > 100  # the image's tokens are in the prompt


def test_concurrent_requests_and_token_accounting(vllm, local) -> None:  # type: ignore[no-untyped-def]
    async def many() -> list:  # type: ignore[type-arg]
        remote = _policy(vllm, local)
        try:
            return list(await asyncio.gather(*(remote.predict(_turns(i * 20)) for i in range(6))))
        finally:
            await remote.aclose()

    results = asyncio.run(many())
    assert len(results) == 6
    assert all(r.completion_tokens and r.completion_tokens <= 24 for r in results)
    assert all(r.model_version == vllm["model"] for r in results)


def test_original_screenshots_are_resized_by_the_server_to_the_same_size(vllm, local) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    original = replace(PROMPT, image_transport="original")
    shot = Screenshot.from_image(Image.new("RGB", (360, 800), (200, 90, 30)))
    turns = build_conversation("Open Clock", [shot], [], original)
    part = turns[1].parts[-1]
    assert part.original == shot.data
    assert part.resized is None
    assert part.image.size == (360, 800)  # type: ignore[union-attr]  # decoded on demand (local backends)

    async def both() -> tuple[int, int]:
        remote = _policy(vllm, local)
        sent = VllmPolicy(remote.settings, prompt=original, sampling=SAMPLING)
        try:
            a = await remote.predict(build_conversation("Open Clock", [shot], [], PROMPT))
            b = await sent.predict(turns)
            return a.prompt_tokens or 0, b.prompt_tokens or 0
        finally:
            await remote.aclose()
            await sent.aclose()

    resized_tokens, original_tokens = asyncio.run(both())
    assert original_tokens == resized_tokens > 100  # the server made the same number of image patches


def test_an_unknown_model_or_too_many_images_is_rejected_without_retry(vllm, local) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        remote = _policy(vllm, local, max_retries=3)
        try:
            with pytest.raises(PolicyRejected, match="404"):
                await remote.predict(_turns(), model="no-such-adapter")
            shots = [Screenshot.from_image(Image.new("RGB", (360, 800), (i, 0, 0))) for i in range(3)]
            three = build_conversation(
                "g", shots, ["a", "b"], PromptSettings(image_limit=3, resize=PROMPT.resize)
            )
            with pytest.raises(PolicyRejected, match="400"):
                await remote.predict(three)
        finally:
            await remote.aclose()

    asyncio.run(scenario())


def test_a_killed_server_gives_policy_unavailable_and_ends_the_episode(
    vllm, local, tmp_path, fleet, sim
) -> None:  # type: ignore[no-untyped-def]
    from agent.episode import EpisodeRunner, EpisodeSettings
    from agent.store import TrajectoryStore
    from agent.trajectory import EpisodeStatus
    from devices.adb import AdbDriver, DriverSettings

    store = TrajectoryStore(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "shots")
    store.migrate()
    remote = _policy(vllm, local, max_retries=1, backoff_s=0.1, timeout_s=20)
    driver = AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))

    def kill_after_first(episode, step) -> None:  # type: ignore[no-untyped-def]
        if step.index == 0 and vllm["proc"].poll() is None:
            os.killpg(vllm["proc"].pid, signal.SIGKILL)
            vllm["proc"].wait(30)

    runner = EpisodeRunner(
        remote,
        driver,
        store,
        EpisodeSettings(settle_s=0, max_parse_errors=5),
        prompt=PROMPT,
        on_step=kill_after_first,
    )

    async def run_then_ask_again() -> Any:
        try:
            episode = await runner.run("Turn on Wi-Fi")
            with pytest.raises(PolicyUnavailable):  # and so does the next request
                await remote.predict(_turns())
            return episode
        finally:
            await remote.aclose()

    episode = asyncio.run(run_then_ask_again())
    assert episode.status is EpisodeStatus.ERROR
    assert episode.error is not None
    assert "policy error" in episode.error
    recorded = store.get(episode.id)
    assert len(recorded.steps) == 1  # the step taken before the server died is kept
    assert recorded.steps[0].raw_response
