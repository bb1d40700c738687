"""Checkpoints: Hugging Face directories with the run's record beside the weights.

A run directory holds ``config.json``, ``manifest.json``, ``metrics.jsonl`` and
``checkpoints/step-NNNNNN/``; each checkpoint is a loadable model directory (full weights with the
processor, or a PEFT adapter) plus ``run.json``: the config, the data manifest's hash, the metrics
at that step, the base model and the parent version. ``state.pt`` inside each checkpoint holds the
optimiser and RNG state for a resume. A checkpoint directory appears only once complete (written
under a temporary name, then renamed), so a crash never leaves a half-written one behind.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.checkpoint import checkpoint_system_prompt
from agent.prompt import PromptSettings
from train.model import PolicyModel

RUN_FILE = "run.json"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def save_checkpoint(
    run_dir: Path,
    step: int,
    policy: PolicyModel,
    record: dict[str, Any],
    write_state: Callable[[Path], None] | None = None,
) -> Path:
    """``write_state(dir)`` adds the resume state inside the checkpoint before it appears, so
    weights and state always belong to the same step, wherever a crash lands."""
    out = checkpoint_dir(run_dir, step)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save(tmp)
    if write_state is not None:
        write_state(tmp)
    kind = "adapter" if policy.has_adapter else "full"
    body = {"step": step, "kind": kind, "base_model": str(policy.model_dir), **record}
    (tmp / RUN_FILE).write_text(json.dumps(body, indent=2, default=str), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = sorted(p for p in (run_dir / "checkpoints").glob("step-*") if not p.name.endswith(".tmp"))
    return found[-1] if found else None


def read_record(checkpoint: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((checkpoint / RUN_FILE).read_text(encoding="utf-8"))
    return data


def model_and_adapter(checkpoint: Path) -> tuple[Path, Path | None]:
    """What to load for a checkpoint: (model directory, adapter directory or None)."""
    record = read_record(checkpoint) if (checkpoint / RUN_FILE).is_file() else {"kind": "full"}
    if record["kind"] == "adapter":
        return Path(record["base_model"]), checkpoint
    return checkpoint, None


def merge_adapter(checkpoint: Path, out: Path) -> Path:
    """Fold an adapter checkpoint into its base: a full checkpoint vLLM and every loader can read."""
    base, adapter = model_and_adapter(checkpoint)
    if adapter is None:
        raise ValueError(f"{checkpoint} is a full checkpoint already")
    prompt = PromptSettings(system_prompt=checkpoint_system_prompt(base, adapter))
    policy = PolicyModel(base, adapter_dir=adapter, prompt=prompt)
    policy.save(out, merged=True)
    record = {**read_record(checkpoint), "kind": "full", "merged_from": str(checkpoint)}
    (out / RUN_FILE).write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    return out
