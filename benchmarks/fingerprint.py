"""Weights fingerprints: how far the trainer's numbers and an engine's lie apart on the same weights,
and how far versions lie apart, so that the swap's tolerance (``agent.fingerprint``) is measured.

    .venv/bin/python benchmarks/fingerprint.py [--sft DIR] [--json out.json]

What it does: builds the tiny Qwen2.5-VL and trains it briefly (as ``benchmarks/hotswap.py`` does,
or takes ``--sft DIR``), trains a LoRA adapter on other tasks, and makes copies of that adapter
moved by a fraction of what its training moved it (``--fractions``: the distance between a version
and one trained a little further). Each is scored on the probe in transformers (float32, the
retraining job's record) and by the vLLM CPU server (LoRA on), and the script prints, per version,
the distance trainer-to-engine and the distance to the SFT model. The tolerance must sit above the
first and below the second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from hotswap import SERVED, start_vllm, train_models
from machine import about


def moved(adapter: Path, fraction: float, out: Path) -> Path:
    """``adapter`` with its LoRA B matrices scaled by ``fraction`` (B starts at 0: a fraction of
    what training moved the adapter)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(adapter, out, dirs_exist_ok=True)
    weights = load_file(out / "adapter_model.safetensors")
    save_file(
        {k: v * fraction if "lora_B" in k else v for k, v in weights.items()},
        out / "adapter_model.safetensors",
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sft", type=Path, help="an SFT checkpoint to start from (else one is trained)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.03, 0.1, 1.0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", default=".cache/fingerprint", help="where the trained models are kept")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from agent import fingerprint
    from agent.checkpoint import checkpoint_system_prompt
    from agent.devkit.tiny_model import ensure_tiny_model
    from agent.prompt import PromptSettings
    from agent.vllm_admin import VllmAdmin
    from agent.vllm_policy import VllmPolicy, VllmSettings

    print(about())
    work = Path(args.cache).resolve()  # the trained models are kept: a second run only measures
    work.mkdir(parents=True, exist_ok=True)
    base = ensure_tiny_model(work / "models")
    done = work / "models.json"
    if done.is_file() and all(Path(p).exists() for p in json.loads(done.read_text()).values()):
        models = {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    else:
        models = train_models(base, work, args.sft)
        done.write_text(json.dumps({k: str(v) for k, v in models.items()}), encoding="utf-8")
    sft, adapter = models["sft"], models["adapter"]
    versions: dict[str, Path | None] = {"sft": None}
    for fraction in args.fractions:
        versions[f"adapter x{fraction:g}"] = moved(adapter, fraction, work / f"adapter-{fraction:g}")

    recorded = {name: fingerprint.of_weights(sft, path) for name, path in versions.items()}
    proc, url = start_vllm(sft, work / "vllm.log")

    async def measure() -> list[dict[str, Any]]:
        admin = VllmAdmin(url)
        client = VllmPolicy(VllmSettings(base_url=url, model=SERVED, timeout_s=120))
        rows = []
        try:
            for name, path in versions.items():
                model = SERVED
                if path is not None:
                    model = name.replace(" ", "-")
                    await asyncio.to_thread(admin.load_adapter, model, str(path))
                prompt = PromptSettings(system_prompt=checkpoint_system_prompt(sft, path))
                values = await client.score(fingerprint.probe(prompt), fingerprint.TOKENS, model=model)
                engine = fingerprint.Fingerprint(tuple(values), fingerprint.probe_key(prompt), "vllm")
                rows.append(
                    {
                        "version": name,
                        "trainer_to_engine": fingerprint.distance(recorded[name], engine),
                        "to_sft_record": fingerprint.distance(recorded[name], recorded["sft"]),
                        "engine_to_sft_record": fingerprint.distance(engine, recorded["sft"]),
                    }
                )
        finally:
            await client.aclose()
            admin.close()
        return rows

    try:
        rows = asyncio.run(measure())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    print(f"{'version':<18}{'trainer-engine':>16}{'to sft (records)':>18}{'engine to sft':>15}")
    for row in rows:
        print(
            f"{row['version']:<18}{row['trainer_to_engine']:>16.5f}{row['to_sft_record']:>18.5f}"
            f"{row['engine_to_sft_record']:>15.5f}"
        )
    print(f"tolerance in force: {fingerprint.DEFAULT_TOLERANCE}")
    if args.json:
        args.json.write_text(json.dumps({"machine": about(), "rows": rows}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
