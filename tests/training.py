"""Helpers of the tests that train: the simulated-phone data, CPU-sized prompts, and the real
``uis1`` command line in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

SIM_DATA: dict[str, Any] = {
    "sources": [{"kind": "sim", "tasks": ["wifi_on", "bluetooth_on", "airplane_mode_on"], "seeds": [0]}],
    "val_fraction": 0.0,
}
RESIZE = {"max_pixels": 64 * 28 * 28}  # 64 image tokens: CPU-sized prompts


def uis1(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real ``uis1`` entry point in a fresh process."""
    command = [str(Path(sys.executable).parent / "uis1"), *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=clean_env(), check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"uis1 {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


DISTRIBUTED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")


def clean_env() -> dict[str, str]:
    """This process's environment without the process-group variables an in-process DeepSpeed
    test left behind (a child would try to join this process's group)."""
    return {k: v for k, v in os.environ.items() if k not in DISTRIBUTED} | {"PYTHONUNBUFFERED": "1"}


def write_config(path: Path, body: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def train_sft(model: Path, root: Path, data: dict[str, Any], steps: int, **extra: Any) -> Path:
    """``uis1 train sft`` of ``model`` on ``data`` for ``steps`` (lr 3e-3, batches of 8, CPU-sized
    prompts) in ``root``; ``extra`` overrides. Returns the checkpoint of the last step."""
    body = {
        "model": str(model),
        "output_dir": str(root / "run"),
        "data": data,
        "resize": RESIZE,
        "optim": {"lr": 3e-3},
        "batch_size": 8,
        "epochs": 100,
        "max_steps": steps,
        "save_every": steps,
        **extra,
    }
    uis1("train", "sft", "--config", str(write_config(root / "sft.yaml", body)), "--quiet")
    return root / "run" / "checkpoints" / f"step-{steps:06d}"


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
