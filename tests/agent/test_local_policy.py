from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from PIL import Image

from agent.geometry import ResizeSettings
from agent.policy import PolicyError, SamplingSettings
from agent.prompt import PromptSettings, Screenshot, build_conversation

pytest.importorskip("peft")

PROMPT = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))
SAMPLING = SamplingSettings(max_tokens=12)


def _turns():  # type: ignore[no-untyped-def]
    shot = Screenshot.from_image(Image.new("RGB", (360, 800), (20, 160, 90)))
    return build_conversation("Turn on Wi-Fi", [shot], [], PROMPT)


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model

    from agent.checkpoint import load_model

    torch.manual_seed(3)
    model = get_peft_model(
        load_model(tiny_model_dir),
        LoraConfig(
            r=8,
            lora_alpha=16,
            init_lora_weights=False,
            target_modules=r".*language_model.*\.(q_proj|v_proj)",
        ),
    )
    out = tmp_path_factory.mktemp("adapters") / "wifi-lora-v2"
    model.save_pretrained(out)
    return out


def test_greedy_generation_is_deterministic_with_token_counts_and_logprobs(tiny_model_dir: Path) -> None:
    from agent.local_policy import LocalPolicy

    policy = LocalPolicy(tiny_model_dir, prompt=PROMPT, sampling=SAMPLING)
    a = asyncio.run(policy.predict(_turns()))
    b = asyncio.run(policy.predict(_turns(), sampling=SAMPLING.model_copy(update={"logprobs": True})))
    assert a.raw == b.raw
    assert a.completion_tokens == 12
    assert a.prompt_tokens is not None
    assert a.prompt_tokens > 100
    assert b.logprobs is not None
    assert len(b.logprobs) == 12
    assert all(lp <= 0 for lp in b.logprobs)
    with pytest.raises(PolicyError, match="serves"):
        asyncio.run(policy.predict(_turns(), model="another-model"))


def test_a_lora_adapter_changes_the_policy_and_names_its_version(
    tiny_model_dir: Path, adapter_dir: Path
) -> None:
    from agent.local_policy import LocalPolicy

    base = asyncio.run(LocalPolicy(tiny_model_dir, prompt=PROMPT, sampling=SAMPLING).predict(_turns()))
    tuned_policy = LocalPolicy(tiny_model_dir, adapter_dir=adapter_dir, prompt=PROMPT, sampling=SAMPLING)
    tuned = asyncio.run(tuned_policy.predict(_turns()))
    assert tuned_policy.model_version == "wifi-lora-v2"
    assert tuned.model_version == "wifi-lora-v2"
    assert tuned.raw != base.raw
