"""Weights fingerprints in the in-process engine's swaps: a version is served only when its answer to
the probe is what the training job recorded of its weights (agent.fingerprint). The vLLM engine's
side is in test_hotswap.py."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from agent import fingerprint
from agent.registry import Kind, ModelRegistry, State
from agent.store import TrajectoryStore
from tests.training import RESIZE

pytestmark = pytest.mark.timeout(600)


def random_adapter(base: Path, out: Path, seed: int, scale: float = 0.05) -> Path:
    """A LoRA adapter on ``base`` with small random weights: another version of the same model,
    whose answers still parse."""
    import torch
    from peft import LoraConfig, get_peft_model

    from agent.checkpoint import load_model

    torch.manual_seed(seed)
    model = load_model(base, dtype="float32", device="cpu")
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, weight in peft_model.named_parameters():
            if "lora_B" in name:
                weight.mul_(scale)
    peft_model.save_pretrained(str(out))
    return out


def test_the_trainers_numbers_and_the_in_process_engines_agree_and_versions_differ(
    sft_checkpoint: Path, tmp_path: Path
) -> None:
    plain = fingerprint.of_weights(sft_checkpoint)
    again = fingerprint.of_weights(sft_checkpoint)
    other = fingerprint.of_weights(sft_checkpoint, random_adapter(sft_checkpoint, tmp_path / "a", 1))
    assert len(plain.logprobs) == fingerprint.TOKENS
    assert all(v <= 0 for v in plain.logprobs)
    assert fingerprint.distance(plain, again) < 1e-6
    assert fingerprint.distance(plain, other) > fingerprint.DEFAULT_TOLERANCE  # a small move is seen


def test_a_swap_serves_only_the_weights_that_were_trained(
    sft_checkpoint: Path, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalModels, LocalPolicy
    from agent.prompt import PromptSettings
    from serve.models.swap import LocalSwapController, SwapSettings
    from serve.models.swap.base import CHECK_KEY, CanaryFailed

    store = TrajectoryStore(f"sqlite:///{tmp_path / 't.db'}", tmp_path / "shots")
    store.migrate()
    registry = ModelRegistry(store.engine)
    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    engine = LocalModels(LocalPolicy(sft_checkpoint, prompt=prompt, model_version="base"))
    swap = LocalSwapController(
        store, registry, engine, prompt, SwapSettings(canary_max_tokens=96, retire_after_s=0)
    )

    def register(name: str, adapter: Path | None, record_of: Path | None) -> None:
        """``name`` serving ``adapter`` on the base, with the record the training job made of the
        weights in ``record_of`` (the same adapter, normally)."""
        record = fingerprint.of_weights(sft_checkpoint, record_of).record()
        registry.register(
            name,
            base=str(sft_checkpoint),
            adapter=str(adapter) if adapter else None,
            kind=Kind.ADAPTER if adapter else Kind.BASE,
            served_name="base" if adapter is None else name,
            info={fingerprint.INFO_KEY: record},
        )

    one = random_adapter(sft_checkpoint, tmp_path / "one", 1)
    two = random_adapter(sft_checkpoint, tmp_path / "two", 2)
    three = random_adapter(sft_checkpoint, tmp_path / "three", 3)

    async def go() -> None:
        # The normal case: each swap's served answer is its record.
        register("base", None, None)
        first = await swap.promote("base", actor="t")
        assert first.canary["fingerprint"]["verified"] is True
        register("v1", one, one)
        result = await swap.promote("v1", actor="t")
        assert result.canary["fingerprint"]["verified"] is True
        assert result.canary["fingerprint"]["distance"] < fingerprint.DEFAULT_TOLERANCE
        assert result.canary["fingerprint"]["records_apart"] > fingerprint.DEFAULT_TOLERANCE
        assert registry.get("v1").info[CHECK_KEY]["verified"] is True

        # A stale adapter: the previous version's weights under the new name (a copy that never
        # got the trained files); its record is of what was trained.
        stale = shutil.copytree(one, tmp_path / "stale")
        register("v2-stale", stale, two)
        with pytest.raises(CanaryFailed, match="answers as the previous version v1"):
            await swap.promote("v2-stale", actor="t")
        assert registry.get("v2-stale").state == State.REJECTED
        assert registry.promoted().name == "v1"  # type: ignore[union-attr]
        assert "v2-stale" not in engine.served_models()

        # A load that did not take: the engine drops the adapter and serves the base weights
        # under the new name (vLLM #23796's dropped vision LoRA does the same, with a warning).
        register("v3", three, three)
        real_load = LocalModels.load

        def dropping(self, name, checkpoint, adapter=None) -> None:  # type: ignore[no-untyped-def]
            real_load(self, name, checkpoint, None)

        monkeypatch.setattr(LocalModels, "load", dropping)
        with pytest.raises(CanaryFailed, match="are not the trained ones"):
            await swap.promote("v3", actor="t")
        monkeypatch.setattr(LocalModels, "load", real_load)
        assert registry.get("v3").state == State.REJECTED

        # Without a record the version serves, said to be unverified.
        registry.register("v4", base=str(sft_checkpoint), adapter=str(two), kind=Kind.ADAPTER)
        unrecorded = await swap.promote("v4", actor="t")
        assert unrecorded.canary["fingerprint"]["verified"] is False
        assert "no recorded fingerprint" in unrecorded.canary["fingerprint"]["why"]
        await swap.aclose()

    asyncio.run(go())


def test_readiness_and_the_models_list_say_whether_the_serving_weights_were_verified(  # type: ignore[no-untyped-def]
    make_service, sft_checkpoint: Path, tmp_path: Path, monkeypatch
) -> None:
    import json

    from typer.testing import CliRunner

    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalModels, LocalPolicy
    from agent.prompt import PromptSettings
    from agent.store import make_engine
    from serve.cli.models import models_app
    from serve.models.swap import SwapSettings

    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    engine = LocalModels(LocalPolicy(sft_checkpoint, prompt=prompt, model_version="base"))
    service = make_service(engine, resize=prompt.resize, swap=SwapSettings(canary_max_tokens=96))  # type: ignore[arg-type]
    admin = service.client(service.admin)
    assert admin.get("/readyz").json()["serving"] is None  # nothing promoted yet
    db = make_engine(service.settings.store.url)
    registry = ModelRegistry(db)
    record = fingerprint.of_weights(sft_checkpoint).record()
    registry.register("base", base=str(sft_checkpoint), kind=Kind.BASE, info={fingerprint.INFO_KEY: record})
    adapter = random_adapter(sft_checkpoint, tmp_path / "a", 5)
    registry.register("hand-made", base=str(sft_checkpoint), adapter=str(adapter), kind=Kind.ADAPTER)
    db.dispose()

    assert admin.post("/v1/models/promote", json={"version": "base"}).status_code == 200
    serving = admin.get("/readyz").json()["serving"]
    assert serving["version"] == "base"
    assert serving["fingerprint"]["verified"] is True
    assert "verified: probe distance" in serving["fingerprint"]["why"]

    monkeypatch.setenv("UIS1_STORE__URL", service.settings.store.url)
    monkeypatch.setenv("UIS1_STORE__SCREENSHOT_DIR", str(service.settings.store.screenshot_dir))
    listed = CliRunner().invoke(models_app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {r["name"]: r["fingerprint"] for r in json.loads(listed.output)} == {
        "base": "verified",
        "hand-made": "-",
    }

    assert admin.post("/v1/models/promote", json={"version": "hand-made"}).status_code == 200
    serving = admin.get("/readyz").json()["serving"]
    assert serving == {
        "version": "hand-made",
        "fingerprint": serving["fingerprint"] | {"verified": False},
    }
    assert "no recorded fingerprint" in serving["fingerprint"]["why"]
