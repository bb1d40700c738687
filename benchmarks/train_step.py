"""Where a semi-online RL step spends its time: rollout, old and reference log-probs, update.

    .venv/bin/python benchmarks/train_step.py                      # plain torch, 3 steps
    .venv/bin/python benchmarks/train_step.py --learner both --steps 5 --json out.json

Runs the real trainer (``train.rl.train_rl``) on the tiny Qwen2.5-VL built from config, over
expert trajectories of the simulated phone's tasks, and prints one row per step and the mean of
the steps after the first (which pays for warm-up). Patching is unlimited (ε = -1) by default so
that every rollout covers the whole trajectory whatever the untrained model writes: the work per
step is then fixed by the data, not by luck. Figures depend on the machine, which is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("rollout_s", "old_logprob_s", "ref_logprob_s", "update_s")


def machine() -> dict[str, Any]:
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}  # fmt: skip


def run_once(args: argparse.Namespace, model: Path, learner: str, out: Path) -> list[dict[str, Any]]:
    from train.config import RLConfig
    from train.rl import train_rl
    from train.tracking import read_metrics

    config = RLConfig.model_validate({
        "model": model, "output_dir": out, "seed": args.seed,
        "data": {"sources": [{"kind": "sim", "tasks": args.tasks, "seeds": [0]}], "val_fraction": 0.0},
        # The code-form reward: the paper form scores an untrained model 0 everywhere (same work).
        "rollout": {"n": args.n, "max_new_tokens": args.max_new_tokens, "reward": "code",
                    "patch": {"threshold": args.threshold}},
        "dynamic_sampling": {"enabled": False},
        "learner": {"backend": learner, "device": args.device},
        "resize": {"max_pixels": args.image_tokens * 28 * 28},
        "tasks_per_step": args.tasks_per_step, "mini_batches": args.mini_batches,
        "max_steps": args.steps, "epochs": 1000, "save_every": 1 << 20, "eval_every": None,
    })  # fmt: skip
    train_rl(config, progress=not args.quiet)
    return read_metrics(out)


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    measured = rows[1:] or rows
    mean = {
        k: statistics.fmean(r[k] for r in measured) for k in (*PHASES, "tokens", "samples", "rollout_steps")
    }
    total = sum(mean[k] for k in PHASES)
    return {**mean, "step_s": total, "steps_per_s": 1 / total if total else 0.0,
            "update_tokens_per_s": mean["tokens"] / mean["update_s"] if mean["update_s"] else 0.0}  # fmt: skip


def table(name: str, rows: list[dict[str, Any]], summary: dict[str, float]) -> str:
    head = f"{'step':>6} {'rollout':>9} {'old lp':>8} {'ref lp':>8} {'update':>8} {'total':>8} {'samples':>8} {'tokens':>7}"
    lines = [f"== learner: {name}", head]
    for r in rows:
        total = sum(r[k] for k in PHASES)
        lines.append(f"{r['step']:>6} {r['rollout_s']:>8.2f}s {r['old_logprob_s']:>7.2f}s {r['ref_logprob_s']:>7.2f}s "
                     f"{r['update_s']:>7.2f}s {total:>7.2f}s {r['samples']:>8} {int(r['tokens']):>7}")  # fmt: skip
    s = summary
    share = {k: 100 * s[k] / s["step_s"] if s["step_s"] else 0.0 for k in PHASES}
    lines.append(f"{'mean':>6} {s['rollout_s']:>8.2f}s {s['old_logprob_s']:>7.2f}s {s['ref_logprob_s']:>7.2f}s "
                 f"{s['update_s']:>7.2f}s {s['step_s']:>7.2f}s {s['samples']:>8.1f} {s['tokens']:>7.0f}")  # fmt: skip
    lines.append(f"{'share':>6} {share['rollout_s']:>8.1f}% {share['old_logprob_s']:>7.1f}% "
                 f"{share['ref_logprob_s']:>7.1f}% {share['update_s']:>7.1f}%")  # fmt: skip
    lines.append(f"steps/s {s['steps_per_s']:.3f}   update tokens/s {s['update_tokens_per_s']:.1f}   "
                 f"rollout steps per rollout {s['rollout_steps']:.1f}")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--learner", choices=("torch", "deepspeed", "both"), default="torch")
    parser.add_argument("--steps", type=int, default=3, help="training steps per learner (first is warm-up)")
    parser.add_argument("--model", type=Path, help="a checkpoint to start from (default: the tiny model)")
    parser.add_argument("--tasks", nargs="+", default=["wifi_on", "bluetooth_on", "airplane_mode_on"])
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--n", type=int, default=4, help="rollouts per task")
    parser.add_argument("--mini-batches", type=int, default=2)
    parser.add_argument("--threshold", type=int, default=-1, help="patch threshold ε (-1: unlimited)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--image-tokens", type=int, default=64, help="image tokens per screenshot")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()

    from agent.tiny_model import ensure_tiny_model

    model = args.model or ensure_tiny_model(ROOT / ".cache")
    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"model: {model.name}; {len(args.tasks)} tasks, {args.tasks_per_step} per step, n={args.n}, "
          f"ε={args.threshold}, {args.image_tokens} image tokens, {args.max_new_tokens} new tokens at most")  # fmt: skip
    learners = ("torch", "deepspeed") if args.learner == "both" else (args.learner,)
    results: dict[str, Any] = {"machine": info, "args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="uis1-bench-") as tmp:
        for name in learners:
            rows = run_once(args, model, name, Path(tmp) / name)
            summary = summarize(rows)
            print(table(name, rows, summary), flush=True)
            results[name] = {"steps": [{k: r[k] for k in ("step", *PHASES, "samples", "tokens")} for r in rows],
                             "mean": summary}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
