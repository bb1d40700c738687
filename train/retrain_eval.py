"""The retraining job's evaluation: the candidate and the version it was trained from, on the same
pinned evaluation (SOP on the held-out split and pinned data, success on simulated-phone tasks).
The parent's scores are kept in the registry by the evaluation's fingerprint and reused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agent.checkpoint import checkpoint_system_prompt
from agent.registry import ModelRegistry, ModelVersion
from train.config import RetrainConfig
from train.curation import CuratedSet
from train.data import InterchangeSource


def fingerprint(config: RetrainConfig, curated: CuratedSet) -> str:
    pinned = {
        "holdout": curated.manifest["files"]["holdout.jsonl"] if config.evaluation.holdout else None,
        "evaluation": config.evaluation.model_dump(mode="json"),
        "resize": config.resize.model_dump(),
    }
    return hashlib.sha256(json.dumps(pinned, sort_keys=True, default=str).encode()).hexdigest()[:16]


def evaluate_both(
    config: RetrainConfig,
    curated: CuratedSet,
    job_dir: Path,
    checkpoint: Path,
    parent: ModelVersion,
    registry: ModelRegistry,
    progress: bool = False,
) -> dict[str, Any]:
    """Both versions on the same pinned evaluation; the parent's scores are reused when it was
    already measured on exactly this evaluation."""
    key = fingerprint(config, curated)
    cached = parent.info.get("evaluations", {}).get(key)
    baseline = cached or evaluate_weights(
        config, curated, job_dir / "eval" / "baseline", Path(parent.weights or ""), progress=progress
    )
    if cached is None:
        registry.annotate(
            parent.name,
            "evaluations",
            {**parent.info.get("evaluations", {}), key: baseline},
            actor="retrain",
        )
    scores = evaluate_weights(config, curated, job_dir / "eval" / "candidate", checkpoint, progress=progress)
    return {
        "fingerprint": key,
        "candidate": scores,
        "baseline": {"version": parent.name, "scores": baseline},
    }


def evaluate_weights(
    config: RetrainConfig, curated: CuratedSet, out: Path, weights: Path, *, progress: bool = False
) -> dict[str, Any]:
    """SOP on the held-out (and pinned) data and online success, for one checkpoint."""
    from agent.local_policy import LocalPolicy
    from agent.prompt import PromptSettings
    from train.checkpoints import model_and_adapter
    from train.config import EvalConfig
    from train.evaluate import run_eval
    from train.learner import resolve_device
    from train.online import online_success

    ev = config.evaluation
    out.mkdir(parents=True, exist_ok=True)
    scores: dict[str, Any] = {"sop": None, "online": None}
    sources = [
        *([InterchangeSource(path=curated.holdout_file)] if ev.holdout and curated.holdout else []),
        *ev.data,
    ]
    if sources:
        eval_config = EvalConfig.model_validate(
            {
                "model": str(weights),
                "output": str(out / "sop.json"),
                "split": "all",
                "metrics": ["sop"],
                "data": {"sources": [s.model_dump(mode="json") for s in sources], "val_fraction": 0.0},
                "resize": config.resize.model_dump(),
                "max_new_tokens": ev.max_new_tokens,
                "device": ev.device,
            }
        )
        result = run_eval(eval_config, progress=progress)
        scores["sop"] = {k: result["sop"][k] for k in ("pg", "tsr", "score")} | {
            "trajectories": result["trajectories"]
        }
    if ev.online is not None:
        model, adapter = model_and_adapter(weights)
        prompt = PromptSettings(resize=config.resize, system_prompt=checkpoint_system_prompt(model, adapter))
        policy = LocalPolicy(model, adapter_dir=adapter, prompt=prompt, device=resolve_device(ev.device))
        online = online_success(policy, ev.online, prompt=prompt, work_dir=out, progress=progress)
        (out / "online.json").write_text(json.dumps(online, indent=2), encoding="utf-8")
        scores["online"] = {"success_rate": online["success_rate"], "episodes": len(online["episodes"])}
    return scores
