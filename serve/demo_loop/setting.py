"""What the loop demo runs (tasks, instances, training lengths) and the starter model it begins with."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from agent.geometry import ResizeSettings

IMAGE = ResizeSettings(max_pixels=128 * 28 * 28, min_pixels=4 * 28 * 28)  # 128 image tokens
MAX_TOKENS = 112  # a compact thought and an action


@dataclass(frozen=True)
class LoopSetting:
    """What the loop demo runs: the starter's training, the tasks, and the retraining."""

    known: tuple[str, ...] = ("wifi_on", "dark_theme_on", "open_app")  # the starter is trained on these
    new: tuple[str, ...] = ("bluetooth_on", "airplane_mode_on")  # and not on these: people correct them
    starter_seeds: tuple[int, ...] = tuple(range(100, 112))  # instances the starter learns from
    starter_steps: int = 500
    seed: int = 0  # the demo's instance of each task (not one the starter saw)
    held_out_seeds: tuple[int, ...] = (1,)  # instances that no training saw: did it generalise?
    gate_seeds: tuple[int, ...] = (1000,)  # the retraining job's own evaluation instances
    retrain_steps: int = 150
    lr: float = 1e-3
    max_steps: int = 8  # per episode

    def starter_key(self) -> str:
        spec = {
            "known": self.known,
            "seeds": self.starter_seeds,
            "steps": self.starter_steps,
            "lr": self.lr,
            "image": IMAGE.model_dump(),
            "format": 1,
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def families(self) -> tuple[str, ...]:
        return (*self.known, *self.new)


def cache_dir() -> Path:
    """Where built models are kept between runs: ``UIS1_CACHE_DIR``, else the user's cache."""
    if os.environ.get("UIS1_CACHE_DIR"):
        return Path(os.environ["UIS1_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uis1"


def _uis1() -> str:
    """This installation's ``uis1`` (the child processes run the same code)."""
    beside = Path(sys.executable).with_name("uis1")
    return str(beside) if beside.exists() else "uis1"


def _sft_body(setting: LoopSetting, steps: int) -> dict[str, Any]:
    return {
        "thoughts": True,
        "system_prompt": "compact",
        "optim": {"lr": setting.lr},
        "batch_size": 8,
        "epochs": 100_000,
        "max_steps": steps,
        "save_every": steps,
        "learner": {"device": "cpu"},
    }


def ensure_starter(setting: LoopSetting, cache: Path, *, quiet: bool = False) -> Path:
    """The starter checkpoint for ``setting``: built once by ``uis1 train sft`` (a child process,
    with its progress bar) from a tiny model and the simulated tasks' expert data, then reused."""
    from agent.devkit.cache import publish
    from agent.devkit.tiny_model import ensure_tiny_model

    target = cache / f"starter-{setting.starter_key()}"
    if (target / "config.json").is_file():
        return target
    base = ensure_tiny_model(cache / "models")
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".starter-", dir=cache))
    try:
        config = {
            "kind": "sft",
            "model": str(base),
            "output_dir": str(staging / "run"),
            "seed": 0,
            "data": {
                "sources": [
                    {
                        "kind": "sim",
                        "tasks": list(setting.known),
                        "seeds": list(setting.starter_seeds),
                        "display": "learnable",
                    }
                ],
                "val_fraction": 0.0,
            },
            "resize": IMAGE.model_dump(),
            **_sft_body(setting, setting.starter_steps),
        }
        path = staging / "sft.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        command = [_uis1(), "train", "sft", "--config", str(path), *(["--quiet"] if quiet else [])]
        if subprocess.run(command, check=False).returncode != 0:
            raise typer.Exit(1)
        checkpoints = sorted((staging / "run" / "checkpoints").glob("step-*"))
        if not checkpoints:
            raise RuntimeError("training the starter wrote no checkpoint")
        publish(checkpoints[-1], target, "config.json")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def retrain_config(setting: LoopSetting, data: Path, store_url: str, starter: Path) -> dict[str, Any]:
    """The retraining job's config: SFT from the serving version on the curated traffic, and an
    evaluation on instances of every demo task that neither the demo nor any training uses."""
    online = {
        "tasks": list(setting.families),
        "seeds": list(setting.gate_seeds),
        "max_steps": setting.max_steps,
        "max_new_tokens": MAX_TOKENS,
        "display": "learnable",
    }
    return {
        "kind": "retrain",
        "work_dir": str(data / "retrain"),
        "store": {"url": store_url, "screenshot_dir": str(data / "screenshots")},
        "base_model": str(starter),
        "base_served_name": "starter",
        "version_prefix": "demo",
        "min_new_episodes": 1,
        "curation": {"holdout_fraction": 0.0},
        "stages": ["sft"],
        "sft": _sft_body(setting, setting.retrain_steps),
        "resize": IMAGE.model_dump(),
        "evaluation": {"holdout": False, "online": online, "max_new_tokens": MAX_TOKENS, "device": "cpu"},
    }
