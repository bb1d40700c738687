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
STAGES = ("sft",)  # what the demo's retraining trains (not yet the nightly job's own stages)


@dataclass(frozen=True)
class LoopSetting:
    """What the loop demo runs: the starter's training, the tasks, and the retraining."""

    known: tuple[str, ...] = ("wifi_on", "dark_theme_on", "open_app")  # the starter is trained on these
    new: tuple[str, ...] = ("bluetooth_on", "airplane_mode_on")  # and not on these: people correct them
    # Instances come from the two sides of each task's split (devices.sim.tasks.splits): the starter's,
    # the demo's own and the traffic's from the trained side; the held-out rows and the gate's from the
    # held-out side, so none has the goal and expert actions of an instance anything trained on.
    starter_instances: int = 12  # per known task, from seed 100 on
    starter_steps: int = 500
    held_out_instances: int = 2  # per task, from seed 1 on: did it generalise?
    gate_instances: int = 4  # per task, from seed 1000 on: the retraining job's own evaluation
    retrain_steps: int = 150
    lr: float = 1e-3
    max_steps: int = 8  # per episode

    def starter_seeds(self, family: str) -> list[int]:
        """The instances of a known task the starter learns from."""
        from devices.sim.tasks.splits import seeds

        return seeds(family, "trained", self.starter_instances, start=100)

    def demo_seed(self, family: str) -> int:
        """The demo's instance of a task: trained side, not one the starter saw."""
        from devices.sim.tasks.splits import seeds

        return seeds(family, "trained", 1, start=0, exclude=frozenset(self.starter_seeds(family)))[0]

    def held_out_seeds(self, family: str) -> list[int]:
        """Instances no training sees (held-out side): whether what it learnt carries over."""
        from devices.sim.tasks.splits import seeds

        return seeds(family, "held_out", self.held_out_instances, start=1)

    def starter_key(self) -> str:
        spec = {
            "known": self.known,
            "seeds": {f: self.starter_seeds(f) for f in self.known},
            "steps": self.starter_steps,
            "lr": self.lr,
            "image": IMAGE.model_dump(),
            "format": 2,
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


def sft_body(lr: float, steps: int) -> dict[str, Any]:
    """The SFT fields the tiny model trains with on a CPU (the starter, and the retraining's sft stage)."""
    return {
        "thoughts": True,
        "system_prompt": "compact",
        "optim": {"lr": lr},
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

    cache = cache.resolve()  # the training config names the model by path: relative would not resolve
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
                    {"kind": "sim", "tasks": [f], "seeds": setting.starter_seeds(f), "display": "learnable"}
                    for f in setting.known
                ],
                "val_fraction": 0.0,
            },
            "resize": IMAGE.model_dump(),
            **sft_body(setting.lr, setting.starter_steps),
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


def retraining_summary(setting: LoopSetting) -> str:
    """What the demo's retraining runs, in one line."""
    return (
        f"stages {', '.join(STAGES)} ({setting.retrain_steps} steps at lr {setting.lr:g} from the serving version, on the "
        f"labelled traffic); gate on {setting.gate_instances} held-out instances per task"
    )


def retrain_config(setting: LoopSetting, data: Path, store_url: str, starter: Path) -> dict[str, Any]:
    """The retraining job's config: SFT from the serving version on the curated traffic, and an
    evaluation on held-out instances of every demo task (none with the goal and expert actions of
    an instance the starter or the traffic has)."""
    online = {
        "tasks": list(setting.families),
        "seeds": [1000],
        "held_out": setting.gate_instances,
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
        "stages": list(STAGES),
        "sft": sft_body(setting.lr, setting.retrain_steps),
        "resize": IMAGE.model_dump(),
        "evaluation": {"holdout": False, "online": online, "max_new_tokens": MAX_TOKENS, "device": "cpu"},
    }
