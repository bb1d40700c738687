"""Trained checkpoints on the real vLLM CPU server, and RL rollouts through it.

The server serves the SFT checkpoint this session trained (a full checkpoint, loaded by vLLM's own
loader); a LoRA RL run then samples its rollouts from the server, loading each step's adapter into
it at runtime, and its adapter merges into a full checkpoint that every loader reads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from agent.geometry import ResizeSettings
from agent.prompt import PromptSettings, Screenshot, build_conversation
from tests.conftest import vllm_server
from tests.train.conftest import RESIZE, SIM_DATA, metrics, uis1, write_config

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # a vLLM server per module
PROMPT = PromptSettings(resize=ResizeSettings(**RESIZE))


@pytest.fixture(scope="module")
def served(sft_checkpoint: Path) -> Iterator[dict[str, Any]]:
    with vllm_server(sft_checkpoint) as server:
        yield server


def _turns(shade: int | None = None):  # type: ignore[no-untyped-def]
    """The first screen of a training task (the model knows it), or a plain frame of one shade."""
    if shade is None:
        from train.data import SimSource, load

        first = load([SimSource(tasks=["wifi_on"])])[0].steps[0].screenshot()
        return build_conversation("Turn on Wi-Fi", [first], [], PROMPT)
    return build_conversation(
        "Turn on Wi-Fi", [Screenshot.from_image(Image.new("RGB", (1080, 2400), (shade, 60, 60)))], [], PROMPT
    )


def test_vllm_serves_the_trained_checkpoint_exactly_as_the_local_backend_runs_it(
    served, sft_checkpoint: Path
) -> None:  # type: ignore[no-untyped-def]
    from agent.local_policy import LocalPolicy
    from agent.policy import SamplingSettings
    from agent.vllm_policy import VllmPolicy, VllmSettings

    sampling = SamplingSettings(max_tokens=96)
    local = LocalPolicy(sft_checkpoint, prompt=PROMPT, sampling=sampling)
    remote = VllmPolicy(
        VllmSettings(
            base_url=served["base_url"], model=served["model"], suppress_token_ids=tuple(local._suppress)
        ),
        prompt=PROMPT,
        sampling=sampling,
    )

    async def both() -> tuple[list[str], list[str]]:
        try:
            turns = [_turns(), _turns(200)]
            return [(await local.predict(t)).raw for t in turns], [
                (await remote.predict(t)).raw for t in turns
            ]
        finally:
            await remote.aclose()

    mine, theirs = asyncio.run(both())
    assert mine == theirs
    assert '"action": "open"' in mine[0]  # the trained model opens Settings on the task's first screen


def test_a_groups_prompts_go_to_vllm_together_and_come_back_in_order(served) -> None:  # type: ignore[no-untyped-def]
    from agent.vllm_policy import VllmSettings
    from train.config import EngineSettings
    from train.model import Sampling
    from train.vllm_engine import VllmEngine

    engine = VllmEngine(
        EngineSettings(kind="vllm", vllm=VllmSettings(base_url=served["base_url"], model=served["model"])),
        None,
        None,
        prompt=PROMPT,
    )
    greedy = Sampling(temperature=0.0, top_p=1.0, max_new_tokens=48)
    try:
        prompts = [_turns(), _turns(200)]
        alone = [engine.generate(turns, 1, greedy)[0].text for turns in prompts]
        together = engine.generate_many([(prompts[0], 1), (prompts[1], 1), (prompts[0], 1)], greedy)
    finally:
        engine.close()
    assert [[g.text for g in group] for group in together] == [[alone[0]], [alone[1]], [alone[0]]]
    assert alone[0] != alone[1]


def test_lora_rl_samples_from_vllm_with_each_steps_adapter_loaded_then_merges(
    served, sft_checkpoint: Path, tmp_path: Path
) -> None:
    body = {
        "model": str(sft_checkpoint),
        "output_dir": "run",
        "seed": 5,
        "data": SIM_DATA,
        "resize": RESIZE,
        "rollout": {"n": 4, "max_new_tokens": 72},
        "tasks_per_step": 2,
        "max_steps": 2,
        "save_every": 2,
        "eval_every": None,
        "dynamic_sampling": {"enabled": False},
        "optim": {"lr": 1e-3},
        "learner": {"lora": {"rank": 8, "alpha": 16}},
        "engine": {
            "kind": "vllm",
            "sync": "lora",
            "vllm": {"base_url": served["base_url"], "model": served["model"]},
        },
    }
    uis1("train", "rl", "--config", str(write_config(tmp_path / "rl.yaml", body)), "--quiet")
    steps = metrics(tmp_path / "run")
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["samples"] > 0 for m in steps)
    assert any(m["reward"] > 0.1 for m in steps)  # vLLM's samples from the trained model score
    listed = [m["id"] for m in httpx.get(f"{served['base_url']}/v1/models").json()["data"]]
    assert f"{served['model']}-rl-step-1" in listed  # the second step's adapter is being served
    assert f"{served['model']}-rl-step-0" not in listed  # and the first one was unloaded

    checkpoint = tmp_path / "run" / "checkpoints" / "step-000002"
    record = json.loads((checkpoint / "run.json").read_text())
    assert record["kind"] == "adapter"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    uis1("train", "merge", str(checkpoint), "--out", str(tmp_path / "merged"))
    assert (tmp_path / "merged" / "model.safetensors").is_file()

    from agent.local_policy import LocalPolicy
    from agent.policy import SamplingSettings

    sampling = SamplingSettings(max_tokens=32)
    with_adapter = LocalPolicy(sft_checkpoint, adapter_dir=checkpoint, prompt=PROMPT, sampling=sampling)
    merged = LocalPolicy(tmp_path / "merged", prompt=PROMPT, sampling=sampling)
    turns = _turns(120)
    assert asyncio.run(with_adapter.predict(turns)).raw == asyncio.run(merged.predict(turns)).raw
