"""Where a semi-online RL step spends its time, and the trainer against TRL's GRPOTrainer.

    .venv/bin/python benchmarks/train_step.py                      # plain torch, 3 steps
    .venv/bin/python benchmarks/train_step.py --learner both --steps 5 --json out.json
    .venv/bin/python benchmarks/train_step.py --trl --model-size tiny small   # side by side with TRL
    .venv/bin/python benchmarks/train_step.py --trl --micro-batch 1 4          # one at a time vs batched

Runs the real trainer (``train.rl.train_rl``) on a Qwen2.5-VL built from config (``tiny``, 0.8 M
parameters, or ``small``, 10 M), over expert trajectories of the simulated phone's tasks, and
prints one row per step and the mean of the steps after the first (which pays for warm-up).
Patching is unlimited (ε = -1) by default so that every rollout covers the whole trajectory
whatever the untrained model writes: the work per step is then fixed by the data, not by luck.

``--trl`` runs the equivalent single-turn GRPO update both ways on the same model and the same
prompts: this trainer with the expert's history (offline RL: each step of each trajectory is one
prompt, n samples each, per-prompt advantages), and ``trl.GRPOTrainer`` on a dataset of exactly
those prompts (same images, same reward function, same n, completion length, β, clip, learning
rate, samples per optimiser step and optimiser steps per generation). Figures depend on the
machine, which is printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import facts

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("rollout_s", "old_logprob_s", "ref_logprob_s", "update_s")


def rl_config(
    args: argparse.Namespace, model: Path, learner: str, out: Path, *, single_turn: bool, micro_batch: int = 1
) -> Any:
    from train.config import RLConfig

    # The code-form reward: the paper form scores an untrained model 0 everywhere (same work).
    rollout: dict[str, Any] = {
        "n": args.n,
        "max_new_tokens": args.max_new_tokens,
        "reward": "code",
        "patch": {"threshold": args.threshold},
    }
    advantage: dict[str, Any] = {}
    if single_turn:  # offline RL: every prompt holds the expert's history; plain per-prompt GRPO
        rollout["history"] = "expert"
        advantage = {"gamma": 0.0, "episode": "none"}
    return RLConfig.model_validate(
        {
            "model": model,
            "output_dir": out,
            "seed": args.seed,
            "data": {"sources": [{"kind": "sim", "tasks": args.tasks, "seeds": [0]}], "val_fraction": 0.0},
            "rollout": rollout,
            "advantage": advantage,
            "dynamic_sampling": {"enabled": False},
            "learner": {"backend": learner, "device": args.device, "micro_batch": micro_batch},
            "optim": {"lr": args.lr},
            "resize": {"max_pixels": args.image_tokens * 28 * 28},
            "tasks_per_step": args.tasks_per_step,
            "mini_batches": args.mini_batches,
            "max_steps": args.steps,
            "epochs": 1000,
            "save_every": 1 << 20,
            "eval_every": None,
            "log_entropy": True,  # TRL computes the entropy of every completion token too
        }
    )


def run_once(
    args: argparse.Namespace,
    model: Path,
    learner: str,
    out: Path,
    *,
    single_turn: bool = False,
    micro_batch: int = 1,
) -> list[dict[str, Any]]:
    from train.rl import train_rl
    from train.tracking import read_metrics

    config = rl_config(args, model, learner, out, single_turn=single_turn, micro_batch=micro_batch)
    train_rl(config, progress=not args.quiet)
    return read_metrics(out)


def run_trl(args: argparse.Namespace, model: Path, out: Path) -> list[dict[str, Any]]:
    """TRL's GRPOTrainer on the prompts the single-turn run trains on: one row per GRPO step
    (generation of ``tasks_per_step`` trajectories' prompts x n, then ``mini_batches`` updates)."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agent.checkpoint import load_model, load_processor
    from agent.geometry import ResizeSettings
    from agent.parsing import parse_response
    from agent.prompt import PromptSettings, build_conversation, prepare_image, to_chat_template_input
    from train.data import load, split
    from train.rewards import score
    from train.rollout import expert_response
    from train.runs import Stream

    config = rl_config(args, model, "torch", out, single_turn=True)
    prompt = PromptSettings(resize=ResizeSettings(max_pixels=args.image_tokens * 28 * 28))
    train, _ = split(load(config.data.sources), 0.0)
    # The trajectories in the order this trainer draws them, so both runs see the same prompts.
    stream = Stream(train, config.seed)
    order = [stream.next() for _ in range(args.steps * args.tasks_per_step)]
    rows: list[dict[str, Any]] = []
    expected: list[tuple[Any, Any]] = []
    for trajectory in order:
        images: list[Any] = []
        history: list[str] = []
        for step in trajectory.steps:
            images.append(prepare_image(step.screenshot(), prompt))
            messages, pictures = to_chat_template_input(
                build_conversation(trajectory.goal, images, history, prompt)
            )
            rows.append({"prompt": messages, "images": pictures, "key": len(expected)})
            expected.append((step.expected(), images[-1].geometry.resized))
            history.append(expert_response(step, images[-1].geometry.resized))
    prompts_per_step = len(rows) // args.steps  # the trajectories have equal lengths here

    def reward(completions: list[Any], key: list[int], **_: Any) -> list[float | None]:
        out: list[float | None] = []
        for completion, k in zip(completions, key, strict=True):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            want, size = expected[k]
            out.append(score(parse_response(text), size, want, form="code").reward)
        return out

    samples = prompts_per_step * args.n
    grpo = GRPOConfig(
        output_dir=str(out),
        use_cpu=args.device in ("auto", "cpu") and not torch.cuda.is_available(),
        per_device_train_batch_size=samples // args.mini_batches,
        gradient_accumulation_steps=1,
        steps_per_generation=args.mini_batches,
        num_generations=args.n,
        max_completion_length=args.max_new_tokens,
        num_iterations=1,
        beta=config.loss.kl_beta,
        epsilon=config.loss.clip_low,
        loss_type="dapo",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=config.optim.weight_decay,
        max_grad_norm=config.optim.grad_clip,
        adam_beta1=config.optim.betas[0],
        adam_beta2=config.optim.betas[1],
        gradient_checkpointing=False,
        bf16=False,
        shuffle_dataset=False,
        max_steps=args.steps * args.mini_batches,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=args.seed,
        disable_tqdm=args.quiet,
    )
    processor = load_processor(model, prompt.resize)
    trainer = GRPOTrainer(
        model=load_model(model, dtype="float32", device="cpu"),
        reward_funcs=[reward],
        args=grpo,
        train_dataset=Dataset.from_list(rows),
        processing_class=processor,
    )
    phases: dict[str, list[float]] = {"generate": [], "step": []}
    generate = trainer._generate_and_score_completions

    def timed_generate(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        result = generate(*a, **k)
        phases["generate"].append(time.perf_counter() - start)
        return result

    trainer._generate_and_score_completions = timed_generate

    class Clock(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            phases["step"].append(time.perf_counter() - self.start)

    trainer.add_callback(Clock())
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "completions/mean_length" in entry]
    result = []
    for i in range(args.steps):
        step_s = sum(phases["step"][i * args.mini_batches : (i + 1) * args.mini_batches])
        length = float(logs[i]["completions/mean_length"]) if i < len(logs) else 0.0  # one per generation
        result.append(
            {
                "step": i + 1,
                "rollout_s": phases["generate"][i],
                "update_s": step_s - phases["generate"][i],
                "samples": samples,
                "tokens": length * samples,
            }
        )
    return result


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    measured = rows[1:] or rows
    mean = {
        k: statistics.fmean(r[k] for r in measured) for k in (*PHASES, "tokens", "samples", "rollout_steps")
    }
    total = sum(mean[k] for k in PHASES)
    return {
        **mean,
        "step_s": total,
        "steps_per_s": 1 / total if total else 0.0,
        "update_tokens_per_s": mean["tokens"] / mean["update_s"] if mean["update_s"] else 0.0,
    }


def table(name: str, rows: list[dict[str, Any]], summary: dict[str, float]) -> str:
    head = f"{'step':>6} {'rollout':>9} {'old lp':>8} {'ref lp':>8} {'update':>8} {'total':>8} {'samples':>8} {'tokens':>7}"
    lines = [f"== learner: {name}", head]
    for r in rows:
        total = sum(r[k] for k in PHASES)
        lines.append(
            f"{r['step']:>6} {r['rollout_s']:>8.2f}s {r['old_logprob_s']:>7.2f}s {r['ref_logprob_s']:>7.2f}s "
            f"{r['update_s']:>7.2f}s {total:>7.2f}s {r['samples']:>8} {int(r['tokens']):>7}"
        )
    s = summary
    share = {k: 100 * s[k] / s["step_s"] if s["step_s"] else 0.0 for k in PHASES}
    lines.append(
        f"{'mean':>6} {s['rollout_s']:>8.2f}s {s['old_logprob_s']:>7.2f}s {s['ref_logprob_s']:>7.2f}s "
        f"{s['update_s']:>7.2f}s {s['step_s']:>7.2f}s {s['samples']:>8.1f} {s['tokens']:>7.0f}"
    )
    lines.append(
        f"{'share':>6} {share['rollout_s']:>8.1f}% {share['old_logprob_s']:>7.1f}% "
        f"{share['ref_logprob_s']:>7.1f}% {share['update_s']:>7.1f}%"
    )
    lines.append(
        f"steps/s {s['steps_per_s']:.3f}   update tokens/s {s['update_tokens_per_s']:.1f}   "
        f"rollout steps per rollout {s['rollout_steps']:.1f}"
    )
    return "\n".join(lines)


def compare_table(size: str, ours: dict[int, dict[str, float]], trl: dict[str, float]) -> str:
    head = (
        f"{'trainer':<26} {'generate+score+logp':>20} {'update':>8} {'step':>8} {'steps/s':>8} "
        f"{'samples/s':>10} {'tokens/s':>9}"
    )
    lines = [f"== single-turn GRPO, model {size}", head]
    rows = [(f"this trainer, micro-batch {m}", s) for m, s in ours.items()] + [("TRL GRPOTrainer", trl)]
    for name, s in rows:
        generate = s["step_s"] - s["update_s"]
        lines.append(
            f"{name:<26} {generate:>19.2f}s {s['update_s']:>7.2f}s {s['step_s']:>7.2f}s "
            f"{1 / s['step_s']:>8.3f} {s['samples'] / s['step_s']:>10.2f} {s['tokens'] / s['step_s']:>9.1f}"
        )
    for m, s in ours.items():
        lines.append(
            f"ratio (TRL step time / this trainer's, micro-batch {m}): {trl['step_s'] / s['step_s']:.2f}"
        )
    return "\n".join(lines)


def summarize_trl(rows: list[dict[str, Any]]) -> dict[str, float]:
    measured = rows[1:] or rows
    mean = {
        k: statistics.fmean(r[k] for r in measured) for k in ("rollout_s", "update_s", "samples", "tokens")
    }
    return {**mean, "step_s": mean["rollout_s"] + mean["update_s"]}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--learner", choices=("torch", "deepspeed", "both"), default="torch")
    parser.add_argument(
        "--trl", action="store_true", help="the single-turn GRPO run, this trainer against TRL's"
    )
    parser.add_argument("--steps", type=int, default=3, help="training steps per learner (first is warm-up)")
    parser.add_argument(
        "--model-size",
        nargs="+",
        choices=("tiny", "small"),
        default=["tiny"],
        help="built from config: tiny (0.8 M parameters) or small (10 M)",
    )
    parser.add_argument("--model", type=Path, help="a checkpoint to start from instead of --model-size")
    parser.add_argument("--tasks", nargs="+", default=["wifi_on", "bluetooth_on", "airplane_mode_on"])
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--n", type=int, default=4, help="rollouts per task")
    parser.add_argument("--mini-batches", type=int, default=2)
    parser.add_argument("--threshold", type=int, default=-1, help="patch threshold ε (-1: unlimited)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--image-tokens", type=int, default=64, help="image tokens per screenshot")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--micro-batch",
        type=int,
        nargs="+",
        default=[1],
        help="samples per forward pass (each value is a run)",
    )
    args = parser.parse_args()

    from agent.devkit.tiny_model import MODEL_SIZES, ensure_tiny_model

    models = (
        {args.model.name: args.model}
        if args.model
        else {size: ensure_tiny_model(ROOT / ".cache", MODEL_SIZES[size]) for size in args.model_size}
    )
    info = facts(with_torch=True)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(
        f"{len(args.tasks)} tasks, {args.tasks_per_step} per step, n={args.n}, ε={args.threshold}, "
        f"{args.image_tokens} image tokens, {args.max_new_tokens} new tokens at most"
    )
    learners = ("torch", "deepspeed") if args.learner == "both" else (args.learner,)
    results: dict[str, Any] = {"machine": info, "args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="uis1-bench-") as tmp:
        for size, model in models.items():
            print(f"model: {size} ({model.name})", flush=True)
            if args.trl:
                ours = {
                    m: run_once(
                        args,
                        model,
                        "torch",
                        Path(tmp) / f"{size}-single-{m}",
                        single_turn=True,
                        micro_batch=m,
                    )
                    for m in args.micro_batch
                }
                trl = run_trl(args, model, Path(tmp) / f"{size}-trl")
                means = {m: summarize(rows) for m, rows in ours.items()}
                trl_mean = summarize_trl(trl)
                print(compare_table(size, means, trl_mean), flush=True)
                results[f"{size}/single_turn"] = {
                    "this": {str(m): {"steps": ours[m], "mean": means[m]} for m in ours},
                    "trl": {"steps": trl, "mean": trl_mean},
                    "ratio": {str(m): trl_mean["step_s"] / means[m]["step_s"] for m in means},
                }
                continue
            for name in learners:
                for m in args.micro_batch:
                    rows = run_once(args, model, name, Path(tmp) / f"{size}-{name}-{m}", micro_batch=m)
                    summary = summarize(rows)
                    print(table(f"{name}, micro-batch {m}", rows, summary), flush=True)
                    results[f"{size}/{name}/{m}"] = {
                        "steps": [{k: r[k] for k in ("step", *PHASES, "samples", "tokens")} for r in rows],
                        "mean": summary,
                    }
    if args.json:
        args.json.write_text(json.dumps(results, default=str, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
