"""Learning on the simulated phone: SFT, offline RL and semi-online RL from one small model.

    .venv/bin/python benchmarks/learning.py                      # 6 methods x 3 seeds, ~50 min on 2 cores
    .venv/bin/python benchmarks/learning.py --seeds 0 --budget 20 --methods sft semi_eps1   # a quick look

The paper's central claim, in miniature, with the real trainers (``train.sft``, ``train.rl``):

1. **Initial model.** The tiny Qwen2.5-VL (random weights, built from config) knows nothing, not
   even the response format, so RL from it earns reward 0 everywhere and cannot start. As the
   paper starts from a base model that can already act, the initial model here is the tiny model
   after SFT on *other* simulated tasks (``BASE_TASKS``): it writes well-formed actions but has
   never seen the target tasks. It is built once and cached (``.cache/learning``).
2. **Data.** Expert trajectories of ``TARGET_TASKS`` (several instances each: other contacts,
   products, files, apps), split by trajectory into training and held-out sets; the same split
   for every method and seed.
3. **Methods**, each with the same time budget of training (``--budget`` seconds of the trainer's
   own loop: rollouts, log-probs and updates; loading and saving are not counted):
   ``sft`` (SFT on the expert steps), ``offline`` (RL with the expert's history: per-step GRPO,
   γ = 0, no episode term), ``semi_eps0`` / ``semi_eps1`` / ``semi_epsinf`` (semi-online RL with
   patch threshold ε = 0, 1, unlimited; the paper's advantages and dynamic sampling), and
   ``sft+semi`` (half the budget SFT, then semi-online RL with ε = 1 for the other half).
4. **Evaluation** of every final checkpoint: SOP (PG, TSR; greedy, own history, no patching) on
   the held-out expert trajectories, and online success on the held-out task instances, each run
   as a whole episode on a simulated phone behind a real adb server (``train.online``).

Printed: one row per method with mean ± standard deviation over the seeds, the initial model's
row, and the training steps, samples and seconds each method got. Figures depend on the machine,
which is printed; the budget is in seconds, so a faster machine trains more steps.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Tasks the initial model is trained on (the "pretraining"), and the tasks the methods learn.
BASE_TASKS = ["create_contact", "delete_contact", "reply_to_message", "send_new_message", "add_alarm",
              "create_note", "delete_note", "delete_file", "web_search", "remove_from_cart",
              "connect_to_network", "pair_bluetooth_device", "android_version_question", "wifi_off",
              "bluetooth_off", "dark_theme_off"]  # fmt: skip
TARGET_TASKS = ["wifi_on", "bluetooth_on", "dark_theme_on", "airplane_mode_on", "brightness_extreme",
                "open_app", "open_app_from_home", "favorite_contact", "add_to_cart", "star_file",
                "enable_alarm", "delete_alarm", "phone_number_question"]  # fmt: skip
METHODS = ("sft", "offline", "semi_eps0", "semi_eps1", "semi_epsinf", "sft+semi")


def machine() -> dict[str, Any]:
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}  # fmt: skip


def resize(args: argparse.Namespace) -> dict[str, int]:
    return {"max_pixels": args.image_tokens * 28 * 28, "min_pixels": 4 * 28 * 28}


def target_source(args: argparse.Namespace) -> dict[str, Any]:
    return {"kind": "sim", "tasks": args.tasks, "seeds": list(range(args.instances))}


def data(args: argparse.Namespace) -> dict[str, Any]:
    return {"sources": [target_source(args)], "val_fraction": args.heldout, "split_seed": 0}


def initial_model(args: argparse.Namespace, cache: Path) -> Path:
    """The tiny model after SFT on BASE_TASKS (built once per setting, then reused)."""
    from agent.tiny_model import MODEL_SIZES, ensure_tiny_model
    from train.checkpoints import latest_checkpoint
    from train.config import SFTConfig
    from train.sft import train_sft

    spec = MODEL_SIZES[args.model_size]
    setting = {"spec": spec.key(), "tasks": BASE_TASKS, "seeds": [0, 1, 2], "steps": args.base_steps,
               "lr": args.base_lr, "resize": resize(args), "format": 1}  # fmt: skip
    key = hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:12]
    target = cache / f"initial-{args.model_size}-{key}"
    if (target / "config.json").is_file():
        return target
    random_model = ensure_tiny_model(cache, spec)
    with tempfile.TemporaryDirectory(prefix="initial-", dir=cache) as tmp:
        config = SFTConfig.model_validate({
            "model": random_model, "output_dir": Path(tmp) / "run", "seed": 0, "thoughts": False,
            "data": {"sources": [{"kind": "sim", "tasks": BASE_TASKS, "seeds": [0, 1, 2]}], "val_fraction": 0.0},
            "optim": {"lr": args.base_lr}, "resize": resize(args), "batch_size": 8,
            "max_steps": args.base_steps, "epochs": 1000, "save_every": 1 << 20,
        })  # fmt: skip
        print(f"building the initial model: SFT on {len(BASE_TASKS)} other tasks, {args.base_steps} steps",
              flush=True)  # fmt: skip
        run = train_sft(config, progress=not args.quiet)
        checkpoint = latest_checkpoint(run)
        assert checkpoint is not None
        shutil.copytree(checkpoint, Path(tmp) / "model")
        os.replace(Path(tmp) / "model", target)
    return target


def sft_config(args: argparse.Namespace, model: Path, out: Path, seed: int, seconds: float) -> Any:
    from train.config import SFTConfig

    return SFTConfig.model_validate({
        "model": model, "output_dir": out, "seed": seed, "thoughts": False, "data": data(args),
        "optim": {"lr": args.sft_lr}, "resize": resize(args), "batch_size": 8,
        "max_seconds": seconds, "epochs": 1000, "save_every": 1 << 20,
    })  # fmt: skip


def rl_config(args: argparse.Namespace, model: Path, out: Path, seed: int, seconds: float,
              method: str) -> Any:  # fmt: skip
    from train.config import RLConfig

    rollout: dict[str, Any] = {"n": args.n, "max_new_tokens": args.max_new_tokens, "reward": "code"}
    advantage: dict[str, Any] = {}
    sampling: dict[str, Any] = {"enabled": True, "max_extra_draws": args.tasks_per_step}
    if method == "offline":
        rollout["history"] = "expert"
        advantage = {"gamma": 0.0, "episode": "none"}
        sampling = {"enabled": False}
    else:
        rollout["patch"] = {"threshold": {"semi_eps0": 0, "semi_epsinf": -1}.get(method, 1)}
    return RLConfig.model_validate({
        "model": model, "output_dir": out, "seed": seed, "data": data(args), "rollout": rollout,
        "advantage": advantage, "dynamic_sampling": sampling, "optim": {"lr": args.rl_lr},
        "resize": resize(args), "tasks_per_step": args.tasks_per_step, "mini_batches": 2,
        "max_seconds": seconds, "epochs": 1000, "save_every": 1 << 20, "eval_every": None,
        "log_entropy": False,
    })  # fmt: skip


def spent(run: Path, kind: str) -> dict[str, float]:
    """Steps, samples and training seconds of a run, from its metrics."""
    from train.tracking import read_metrics

    rows = read_metrics(run)
    if kind == "sft":
        seconds = sum(r["prepare_s"] + r["update_s"] for r in rows)
        samples = sum(len(r["examples"]) for r in rows)  # the batch's expert steps
    else:
        seconds = sum(r["rollout_s"] + r["old_logprob_s"] + r["ref_logprob_s"] + r["update_s"] for r in rows)
        samples = sum(r["samples"] for r in rows)
    return {"steps": len(rows), "samples": samples, "seconds": seconds}


def train_method(args: argparse.Namespace, method: str, seed: int, model: Path, work: Path
                 ) -> tuple[Path, dict[str, float]]:  # fmt: skip
    from train.checkpoints import latest_checkpoint
    from train.rl import train_rl
    from train.sft import train_sft

    progress = not args.quiet
    if method == "sft":
        run = train_sft(sft_config(args, model, work / "sft", seed, args.budget), progress=progress)
        used = spent(run, "sft")
    elif method == "sft+semi":
        first = train_sft(sft_config(args, model, work / "sft", seed, args.budget / 2), progress=progress)
        middle = latest_checkpoint(first)
        assert middle is not None
        run = train_rl(
            rl_config(args, middle, work / "rl", seed, args.budget / 2, "semi_eps1"), progress=progress
        )
        a, b = spent(first, "sft"), spent(run, "rl")
        used = {k: a[k] + b[k] for k in a}
    else:
        run = train_rl(rl_config(args, model, work / "rl", seed, args.budget, method), progress=progress)
        used = spent(run, "rl")
    checkpoint = latest_checkpoint(run)
    assert checkpoint is not None
    return checkpoint, used


def splits(args: argparse.Namespace) -> tuple[list[Any], list[Any], list[tuple[str, int]]]:
    """The training and held-out expert trajectories, and the held-out (task, seed) instances."""
    from train.data import SimSource, load, split

    source = target_source(args)
    trajectories = load([SimSource(tasks=source["tasks"], seeds=source["seeds"])])
    train, val = split(trajectories, args.heldout, 0)
    instances = []
    for trajectory in val:
        _, name, seed = trajectory.source.split(":")
        instances.append((name, int(seed)))
    return train, val, instances


def evaluate(args: argparse.Namespace, checkpoint: Path, train: list[Any], val: list[Any],
             instances: list[tuple[str, int]]) -> dict[str, float]:  # fmt: skip
    from agent.checkpoint import checkpoint_system_prompt
    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalPolicy
    from agent.prompt import PromptSettings
    from train.evaluate import sop
    from train.model import PolicyModel
    from train.online import OnlineSettings, online_success
    from train.rollout import TransformersEngine

    prompt = PromptSettings(
        resize=ResizeSettings(**resize(args)), system_prompt=checkpoint_system_prompt(checkpoint)
    )
    engine = TransformersEngine(PolicyModel(checkpoint, prompt=prompt), seed=0)
    result = sop(engine, val, prompt=prompt, max_new_tokens=args.max_new_tokens)
    seen = sop(engine, train, prompt=prompt, max_new_tokens=args.max_new_tokens)  # did it learn its data?
    online = 0
    policy = LocalPolicy(checkpoint, prompt=prompt)
    for name, seed in instances:  # one (task, seed) each: its own initial state
        settings = OnlineSettings(tasks=[name], seeds=[seed], max_steps=args.online_steps,
                                  max_new_tokens=args.max_new_tokens)  # fmt: skip
        online += online_success(policy, settings, prompt=prompt)["success_rate"] == 1.0
    return {"pg": result["pg"], "tsr": result["tsr"], "online": online / len(instances) if instances else 0.0,
            "train_pg": seen["pg"], "train_tsr": seen["tsr"]}  # fmt: skip


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{mean:.3f}"


def table(results: dict[str, Any]) -> str:
    head = (f"{'method':<12} {'SOP PG':>15} {'SOP TSR':>15} {'online success':>15} {'train-split PG':>15} "
            f"{'train-split TSR':>15} {'steps':>6} {'samples':>8} {'train s':>8}")  # fmt: skip
    lines = ["held-out trajectories and instances; train-split SOP on the training trajectories", head,
             "-" * len(head)]  # fmt: skip
    for name, runs in results.items():
        if not runs:
            continue
        cols = [spread([r[k] for r in runs]) for k in ("pg", "tsr", "online", "train_pg", "train_tsr")]
        used = [statistics.fmean(r[k] for r in runs) for k in ("steps", "samples", "seconds")]
        lines.append(f"{name:<12} {cols[0]:>15} {cols[1]:>15} {cols[2]:>15} {cols[3]:>15} {cols[4]:>15} "
                     f"{used[0]:>6.1f} {used[1]:>8.0f} {used[2]:>8.1f}")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of training per method and seed")
    parser.add_argument("--model-size", choices=("tiny", "small"), default="tiny")
    parser.add_argument("--image-tokens", type=int, default=32, help="image tokens per screenshot at most")
    parser.add_argument("--tasks", nargs="+", default=TARGET_TASKS)
    parser.add_argument("--instances", type=int, default=6, help="seeds of each target task (instances)")
    parser.add_argument("--heldout", type=float, default=0.3, help="share of trajectories held out")
    parser.add_argument("--base-steps", type=int, default=200, help="SFT steps of the initial model")
    parser.add_argument("--base-lr", type=float, default=2e-3)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--rl-lr", type=float, default=1e-4)
    parser.add_argument("--n", type=int, default=4, help="rollouts per task")
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--online-steps", type=int, default=8, help="step limit of an online episode")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "learning")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()

    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    model = initial_model(args, args.cache)
    train, val, instances = splits(args)
    print(f"model: {args.model_size}, {args.image_tokens} image tokens at most; {len(args.tasks)} target tasks, "
          f"{len(train)} training and {len(val)} held-out trajectories, {len(instances)} held-out instances online; "
          f"budget {args.budget:.0f} s per method and seed", flush=True)  # fmt: skip
    results: dict[str, Any] = {"initial": [{**evaluate(args, model, train, val, instances),
                                            "steps": 0, "samples": 0, "seconds": 0.0}]}  # fmt: skip
    print(table(results), flush=True)
    for method in args.methods:
        results[method] = []
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix=f"learning-{method}-") as tmp:
                started = time.perf_counter()
                checkpoint, used = train_method(args, method, seed, model, Path(tmp))
                scores = evaluate(args, checkpoint, train, val, instances)
                results[method].append({**scores, **used, "seed": seed})
                print(f"  {method} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
                      + f"; {used['steps']} steps, {used['seconds']:.0f} s of training, "
                      f"{time.perf_counter() - started:.0f} s in all", flush=True)  # fmt: skip
    print(table(results))
    if args.json:
        out = {"machine": info, "args": {k: str(v) for k, v in vars(args).items()}, "results": results}
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
