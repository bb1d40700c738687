"""Can the nightly job's RL update raise success at all? RL against an lr-0 control, on the job's path.

    .venv/bin/python benchmarks/rl_sanity.py --threads 2             # every missing piece, then the table
    .venv/bin/python benchmarks/rl_sanity.py run --arms control lora-1e-3 --seeds 0
    .venv/bin/python benchmarks/rl_sanity.py table --json rl-sanity.json   # what is cached so far
    .venv/bin/python benchmarks/rl_sanity.py --quick                 # a minute-scale run of every piece (CI)

The question comes before any comparison of methods: from a policy that sometimes succeeds, does
the update make it succeed more often on the tasks it trains on? If it cannot, no benchmark of
held-out success can show anything, and the nightly job's default only moves weights.

**The path.** Each arm is the ``rl`` stage exactly as ``uis1 retrain`` builds it: the ``rl:`` block
of ``deploy/retrain.yaml`` (the product's nightly config: a LoRA adapter of rank 64, the METHOD.md
defaults), through ``RetrainConfig.stage_config`` into ``train_rl``, on top of a start checkpoint
registered as the version the job trains from. What must change for two CPU cores and the tiny
model is changed in ``SCALING`` and printed with every run; the arm's own change is on top.

**Start and instances.** The start policy is the tiny Qwen2.5-VL (0.8 M parameters) after
``start_steps`` of SFT on the ``start`` seeds of the families (cached). Candidate instances (other
seeds) are screened by sampled success: ``k`` replays of the expert trajectory at temperature 1
with the policy's own history, no patching, a success when every step matches (SOP at T = 1).
Those with sampled success in ``band`` are the instances: the RL data and the evaluation alike.

**Arms** (``ARMS``), each for ``rl_steps`` training steps (equal updates; the updates made are
recorded), evaluated every ``eval_every`` steps by sampled success on the instances, the same
sampling seeds for every arm at each point. ``control`` is the product's config at lr 0: adapters
made, trained, saved and loaded, weights unmoved. Curves: reward, match rate and KL per step.

**The comparison.** The control's weights never move, so all its evaluations (every point, every
seed) estimate the start policy's success per instance; an arm's gain is its final sampled
success minus that, per instance.

**Power and the rule, before the arms.** The start policy is evaluated again on the instances
(the screening's own estimates regress to the mean: the instances were chosen on them), which gives
each instance's success p; two
evaluations of one model then differ per instance with variance 2p(1-p)/k, so the smallest gain
the 95% interval over instances can tell from 0 (at 80% power) is printed before any arm runs.
An arm is *not shown to raise success* when its 95% interval of (arm - control) in final sampled
success, bootstrapped over instances and seeds, includes 0 or lies below it.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from machine import facts
from pieces import bootstrap_gain, deep_merge, dotted, product_rl, read_json, resize, setting_key, write_json

ROOT = Path(__file__).resolve().parent.parent
FORMAT = 1  # bump when a piece's meaning changes: older cached pieces are not reused

# What changes in the product's rl: block for two cores and the tiny model (and why), printed with
# every run. Everything else (LoRA rank 64 / alpha 128, lr, beta, clip, gamma, eta, patching) is the
# product's unless an arm says otherwise.
SCALING: dict[str, tuple[Any, str]] = {
    "learner.backend": ("torch", "DeepSpeed's CPU path makes the same update, slower"),
    "learner.dtype": ("float32", "bf16 on a CPU is ~20x slower"),
    "learner.gradient_checkpointing": (False, "the tiny model fits"),
    "learner.micro_batch": (1, "one sample per pass is fastest on a CPU"),
    "learner.device": ("cpu", "no GPU here"),
    "max_seconds": (None, "arms stop after equal numbers of steps, not seconds"),
    "epochs": (100_000, "as above"),
}


@dataclass(frozen=True)
class Setting:
    families: tuple[str, ...] = (
        "wifi_on",
        "bluetooth_on",
        "airplane_mode_on",
        "dark_theme_on",
        "open_app",
        "add_to_cart",
        "star_file",
    )
    display: str = "learnable"
    image_tokens: int = 128
    start_seeds: int = 16  # per family, seeds from 100000 on (as learning.py's initial split)
    start_steps: int = 300
    start_lr: float = 1e-3
    candidates: int = 6  # per family, seeds from 0 on
    band: tuple[float, float] = (0.25, 0.75)
    max_instances: int = 12
    k: int = 8  # samples per instance in the screening and each evaluation
    rl_steps: int = 12
    eval_every: int = 3
    n: int = 8
    tasks_per_step: int = 4
    mini_batches: int = 2
    max_new_tokens: int = 112

    def key(self) -> str:
        return setting_key(self, FORMAT)


QUICK = Setting(
    families=("wifi_on", "open_app"),
    start_seeds=2,
    start_steps=4,
    candidates=2,
    band=(0.0, 1.0),
    max_instances=2,
    k=2,
    rl_steps=2,
    eval_every=1,
    n=2,
    tasks_per_step=2,
    max_new_tokens=16,
)

# Each arm: the overrides it puts on the product's rl: block (after SCALING). "control" is the
# product's config at lr 0; "nightly" the product's config as it is.
ARMS: dict[str, dict[str, Any]] = {
    "control": {"optim": {"lr": 0.0}},
    "nightly": {},
    "lora-1e-6": {"optim": {"lr": 1e-6}},  # METHOD.md's rate (a full fine-tune's), the file's before
    "lora-1e-5": {"optim": {"lr": 1e-5}},
    "lora-3e-5": {"optim": {"lr": 3e-5}},
    "lora-1e-4": {"optim": {"lr": 1e-4}},
    "lora-3e-4": {"optim": {"lr": 3e-4}},
    "lora-1e-3": {"optim": {"lr": 1e-3}},
    "lora-1e-3-sample-mean": {"optim": {"lr": 1e-3}, "loss": {"aggregation": "sample_mean"}},
    # The switches, each alone on the rate that raised success (lora-1e-4).
    "lora-1e-4-thoughts": {"optim": {"lr": 1e-4}, "rollout": {"patch": {"mode": "off_policy_thought"}}},
    "lora-1e-4-any-step": {"optim": {"lr": 1e-4}, "dynamic_sampling": {"signal": "any_step"}},
    "lora-1e-4-sample-mean": {"optim": {"lr": 1e-4}, "loss": {"aggregation": "sample_mean"}},
    "lora-1e-4-beta-1e-2": {"optim": {"lr": 1e-4}, "loss": {"kl_beta": 1e-2}},
    "full-1e-5": {"optim": {"lr": 1e-5}, "learner": {"lora": None}},
    "full-1e-4": {"optim": {"lr": 1e-4}, "learner": {"lora": None}},
}


# Switch against the rate it sits on, and the rates against METHOD.md's: (arm, against).
COMPARED = (
    ("lora-1e-4-thoughts", "lora-1e-4"),
    ("lora-1e-4-any-step", "lora-1e-4"),
    ("lora-1e-4-sample-mean", "lora-1e-4"),
    ("lora-1e-4-beta-1e-2", "lora-1e-4"),
    ("lora-1e-4", "lora-1e-6"),
    ("lora-3e-4", "lora-1e-4"),
)


# -- data and configs -----------------------------------------------------------------------------
def sim_sources(setting: Setting, seeds: dict[str, list[int]]) -> list[dict[str, Any]]:
    return [
        {"kind": "sim", "tasks": [family], "seeds": list(chosen), "display": setting.display}
        for family, chosen in seeds.items()
        if chosen
    ]


def load_trajectories(setting: Setting, seeds: dict[str, list[int]]) -> list[Any]:
    from train.data import SimSource, load

    return load([SimSource.model_validate(s) for s in sim_sources(setting, seeds)])


def scaled(setting: Setting) -> dict[str, Any]:
    """The scalings of SCALING and the setting's sizes, as overrides of the rl: block."""
    out = dotted({key: value for key, (value, _) in SCALING.items()})
    return deep_merge(
        out,
        {
            "tasks_per_step": setting.tasks_per_step,
            "mini_batches": setting.mini_batches,
            "max_steps": setting.rl_steps,
            "rollout": {"n": setting.n, "max_new_tokens": setting.max_new_tokens},
            "save_every": setting.eval_every,
            "eval_every": None,
            "log_entropy": False,
            "dynamic_sampling": {"max_extra_draws": 4 * setting.tasks_per_step},
        },
    )


def stage_config(setting: Setting, arm: str, start: Path, out: Path, seed: int, data: dict[str, Any]) -> Any:
    """The arm's RLConfig, built as ``uis1 retrain`` builds its rl stage."""
    from train.config import RetrainConfig

    rl = deep_merge(deep_merge(product_rl(), scaled(setting)), {**ARMS[arm], "seed": seed})
    if rl.get("max_seconds") is None:
        rl.pop("max_seconds", None)
    job = RetrainConfig.model_validate(
        {"work_dir": str(out), "stages": ["rl"], "rl": rl, "resize": resize(setting)}
    )
    return job.stage_config("rl", start, out, data, "start")


# -- evaluation -----------------------------------------------------------------------------------
def policy_for(setting: Setting, checkpoint: Path) -> tuple[Any, Any]:
    """An in-process policy on a checkpoint (full, or an adapter on its base) and its prompt."""
    from agent.checkpoint import checkpoint_system_prompt
    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings
    from train.checkpoints import model_and_adapter
    from train.model import PolicyModel

    base, adapter = model_and_adapter(checkpoint)
    prompt = PromptSettings(
        resize=ResizeSettings(**resize(setting)),
        system_prompt=checkpoint_system_prompt(base, adapter),
    )
    return PolicyModel(base, adapter_dir=adapter, prompt=prompt, device="cpu"), prompt


def sampled_success(
    setting: Setting, checkpoint: Path, trajectories: Sequence[Any], seed: int
) -> dict[str, dict[str, float]]:
    """Per instance (``train.evaluate.sampled_sop``): sampled success over k replays at T = 1 with
    the policy's own history, the mean share of steps matched, and greedy success."""
    from train.evaluate import sampled_sop
    from train.rollout import TransformersEngine

    policy, prompt = policy_for(setting, checkpoint)
    engine = TransformersEngine(policy, seed=seed)
    return sampled_sop(
        engine, trajectories, prompt=prompt, k=setting.k, max_new_tokens=setting.max_new_tokens
    )


def detectable(successes: Sequence[float], k: int, seeds: int = 1, control_evals: int = 1) -> float:
    """The smallest mean gain over instances that a 95% interval tells from 0 at 80% power, from
    the sampling noise alone: an arm's final evaluation has variance p(1-p)/k per instance, the
    control's pooled ``control_evals`` evaluations p(1-p)/(k * control_evals)."""
    if not successes:
        return float("nan")
    variance = statistics.fmean(p * (1 - p) / k * (1 + 1 / control_evals) for p in successes)
    return (1.96 + 0.84) * math.sqrt(max(variance, 1e-12) / (len(successes) * seeds))


def control_reference(pieces: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each instance's sampled success under the control, over all its evaluations."""
    values: dict[str, list[float]] = {}
    for piece in pieces:
        for point in piece["curve"]:
            for i, v in point["scores"].items():
                values.setdefault(i, []).append(v["sampled"])
    return {i: statistics.fmean(v) for i, v in values.items()}


# -- pieces ---------------------------------------------------------------------------------------
@dataclass
class Bench:
    setting: Setting
    cache: Path
    progress: bool = True
    say: Callable[[str], None] = field(default=lambda text: print(text, flush=True))

    @property
    def home(self) -> Path:
        return self.cache / self.setting.key()

    def start(self) -> Path:
        """The start policy: the tiny model after SFT on the start seeds (cached)."""
        model = self.home / "start-model"
        if (model / "config.json").is_file():
            return model
        from agent.devkit.tiny_model import ensure_tiny_model
        from train.checkpoints import latest_checkpoint
        from train.config import SFTConfig
        from train.sft import train_sft

        s = self.setting
        self.say(
            f"start policy: SFT, {s.start_steps} steps on {len(s.families)} families x {s.start_seeds} seeds"
        )
        seeds = {f: list(range(100_000, 100_000 + s.start_seeds)) for f in s.families}
        self.home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="start-", dir=self.cache) as tmp:
            config = SFTConfig.model_validate(
                {
                    "model": ensure_tiny_model(self.cache / "models"),
                    "output_dir": Path(tmp) / "sft",
                    "thoughts": True,
                    "system_prompt": "compact",
                    "data": {"sources": sim_sources(s, seeds), "val_fraction": 0.0},
                    "optim": {"lr": s.start_lr},
                    "resize": resize(s),
                    "batch_size": 8,
                    "epochs": 100_000,
                    "max_steps": s.start_steps,
                    "save_every": s.start_steps,
                    "learner": {"device": "cpu"},
                }
            )
            checkpoint = latest_checkpoint(train_sft(config, progress=self.progress))
            assert checkpoint is not None
            shutil.rmtree(model, ignore_errors=True)
            shutil.copytree(checkpoint, model)
        return model

    def screening(self) -> dict[str, Any]:
        """Every candidate's sampled success under the start policy; the instances in the band."""
        done = read_json(self.home / "screening.json")
        if done is not None:
            return done
        s = self.setting
        start = self.start()
        candidates = load_trajectories(s, {f: list(range(s.candidates)) for f in s.families})
        self.say(f"screening {len(candidates)} candidate instances, {s.k} samples each")
        scores = sampled_success(s, start, candidates, seed=10_000)
        low, high = s.band
        inside = [i for i, v in scores.items() if low <= v["sampled"] <= high]
        # Closest to one half first, so the instances with the most to gain either way are kept.
        inside.sort(key=lambda i: (abs(scores[i]["sampled"] - 0.5), i))
        chosen = sorted(inside[: s.max_instances])
        record = {"scores": scores, "instances": chosen}
        write_json(self.home / "screening.json", record)
        return record

    def instances(self) -> tuple[dict[str, list[int]], list[Any]]:
        """The chosen instances as seeds by family (``sim:FAMILY:SEED``), and their trajectories."""
        seeds: dict[str, list[int]] = {}
        for source in self.screening()["instances"]:
            _, family, seed = source.split(":")
            seeds.setdefault(family, []).append(int(seed))
        return seeds, load_trajectories(self.setting, seeds)

    def baseline(self) -> dict[str, Any]:
        """The start policy at evaluation point 0 (the same for every arm: an adapter starts at 0)."""
        done = read_json(self.home / "baseline.json")
        if done is not None:
            return done
        _, data = self.instances()
        record = {"scores": sampled_success(self.setting, self.start(), data, seed=0)}
        write_json(self.home / "baseline.json", record)
        return record

    def arm(self, arm: str, seed: int) -> dict[str, Any]:
        path = self.home / "arms" / f"{arm}-seed{seed}.json"
        done = read_json(path)
        if done is not None:
            return done
        from train.checkpoints import checkpoint_dir
        from train.rl import train_rl
        from train.tracking import read_metrics

        s = self.setting
        seeds, data = self.instances()
        baseline = self.baseline()
        self.say(f"arm {arm}, seed {seed}: {s.rl_steps} RL steps on {len(data)} instances")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"arm-{arm}-", dir=self.cache) as tmp:
            config = stage_config(
                s,
                arm,
                self.start(),
                Path(tmp) / "rl",
                seed,
                {"sources": sim_sources(s, seeds), "val_fraction": 0.0},
            )
            run = train_rl(config, progress=self.progress)
            rows = read_metrics(run)
            curve = [{"step": 0, "scores": baseline["scores"]}]
            for step in range(s.eval_every, s.rl_steps + 1, s.eval_every):
                checkpoint = checkpoint_dir(run, step)
                scores = sampled_success(s, checkpoint, data, seed=step)
                curve.append({"step": step, "scores": scores})
        piece = {
            "arm": arm,
            "seed": seed,
            "config": config.model_dump(mode="json", exclude={"output_dir", "model", "data"}),
            "training": [
                {
                    k: r[k]
                    for k in (
                        "reward",
                        "match_rate",
                        "kl",
                        "clip_fraction",
                        "groups",
                        "groups_dropped",
                        "samples",
                        "pg_loss",
                        "format_rate",
                    )
                }
                for r in rows
            ],
            "updates": sum(s.mini_batches for r in rows if r["samples"]),
            "curve": curve,
            "wall_seconds": time.perf_counter() - started,
        }
        write_json(path, piece)
        final = curve[-1]["scores"]
        self.say(
            f"  {arm} seed {seed}: sampled success {statistics.fmean(v['sampled'] for v in final.values()):.3f} "
            f"(start {statistics.fmean(v['sampled'] for v in baseline['scores'].values()):.3f}), "
            f"{piece['updates']} updates, {piece['wall_seconds']:.0f} s"
        )
        return piece

    def cached_arms(self) -> list[dict[str, Any]]:
        return [p for path in sorted((self.home / "arms").glob("*.json")) if (p := read_json(path))]


# -- the table ------------------------------------------------------------------------------------
def mean_of(scores: dict[str, dict[str, float]], metric: str) -> float:
    return statistics.fmean(v[metric] for v in scores.values()) if scores else float("nan")


def summarise(setting: Setting, pieces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for piece in pieces:
        by_arm.setdefault(piece["arm"], []).append(piece)
    control = control_reference(by_arm.get("control", []))
    # Each arm's final sampled success per instance, by seed: the gains and differences compare these.
    finals = {
        arm: {p["seed"]: {i: v["sampled"] for i, v in p["curve"][-1]["scores"].items()} for p in runs}
        for arm, runs in by_arm.items()
    }
    rows: dict[str, Any] = {}
    for arm in [a for a in ARMS if a in by_arm]:
        runs = by_arm[arm]

        def per_step(key: str, runs: list[dict[str, Any]] = runs) -> list[float]:
            return [
                statistics.fmean(p["training"][j][key] for p in runs) for j in range(len(runs[0]["training"]))
            ]

        steps = [point["step"] for point in runs[0]["curve"]]
        curve = [
            statistics.fmean(mean_of(p["curve"][j]["scores"], "sampled") for p in runs)
            for j in range(len(steps))
        ]
        training = [r for p in runs for r in p["training"]]
        row: dict[str, Any] = {
            "seeds": sorted(finals[arm]),
            "updates": statistics.fmean(p["updates"] for p in runs),
            "steps": steps,
            "sampled_curve": curve,
            "greedy_final": statistics.fmean(mean_of(p["curve"][-1]["scores"], "greedy") for p in runs),
            "progress_final": statistics.fmean(mean_of(p["curve"][-1]["scores"], "progress") for p in runs),
            "reward": per_step("reward"),
            "match_rate": per_step("match_rate"),
            "kl": per_step("kl"),
            "groups_kept": sum(r["groups"] for r in training),
            "groups_dropped": sum(r["groups_dropped"] for r in training),
            "clip_fraction": statistics.fmean(r["clip_fraction"] for r in training) if training else 0.0,
        }
        if arm != "control" and control:
            mean, low, high = bootstrap_gain(finals[arm], control)
            row["gain"] = {"mean": mean, "low": low, "high": high, "shown": bool(low > 0)}
        rows[arm] = row
    differences = {}
    for arm, other in COMPARED:
        if arm in finals and other in finals:
            against = {
                i: statistics.fmean(values[i] for values in finals[other].values())
                for i in set.intersection(*(set(v) for v in finals[other].values()))
            }
            mean, low, high = bootstrap_gain(finals[arm], against)
            differences[f"{arm} - {other}"] = {"mean": mean, "low": low, "high": high}
    return {"arms": rows, "differences": differences}


def render(
    setting: Setting, screening: dict[str, Any], baseline: dict[str, Any], summary: dict[str, Any]
) -> str:
    start = mean_of(baseline["scores"], "sampled")
    lines = [
        f"instances: {len(screening['instances'])} (sampled success in [{setting.band[0]}, {setting.band[1]}] "
        f"of {len(screening['scores'])} screened); start: sampled success {start:.3f}, "
        f"greedy {mean_of(baseline['scores'], 'greedy'):.3f}",
        "",
        "| arm | updates | sampled success by step | final greedy | gain vs control [95%] | kept/dropped | clip | KL (last) |",
        "|---|---:|---|---:|---|---:|---:|---:|",
    ]
    for arm, row in summary["arms"].items():
        curve = " ".join(f"{v:.2f}" for v in row["sampled_curve"])
        gain = row.get("gain")
        gain_text = f"{gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}]" if gain else ""
        lines.append(
            f"| {arm} | {row['updates']:.0f} | {curve} | {row['greedy_final']:.2f} | {gain_text} | "
            f"{row['groups_kept']}/{row['groups_dropped']} | {row['clip_fraction']:.3f} | {row['kl'][-1] if row['kl'] else 0:.2e} |"
        )
    if summary.get("differences"):
        lines += ["", "| difference in final sampled success | mean [95%] |", "|---|---|"]
        for name, d in summary["differences"].items():
            lines.append(f"| {name} | {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] |")
    return "\n".join(lines) + "\n"


def picture(summary: dict[str, Any], out: Path) -> Path:
    """Sampled success at each evaluation, and reward and KL per training step, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for arm, row in summary["arms"].items():
        style = {"color": "black", "linestyle": "--", "zorder": 5} if arm == "control" else {}
        axes[0].plot(row["steps"], row["sampled_curve"], marker="o", label=arm, **style)
        axes[1].plot(range(1, len(row["reward"]) + 1), row["reward"], label=arm, **style)
        axes[2].plot(range(1, len(row["kl"]) + 1), row["kl"], label=arm, **style)
    for ax, title in zip(
        axes,
        ("sampled success on the instances (T = 1)", "mean step reward in training", "KL to the start"),
        strict=True,
    ):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[2].set_yscale("symlog", linthresh=1e-6)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", nargs="?", default="all", choices=("all", "screen", "run", "table"))
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--quick", action="store_true", help="a minute-scale setting of every piece (CI)")
    parser.add_argument("--rl-steps", type=int, help="training steps per arm (default 12)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "rl_sanity")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--figure", type=Path, help="draw the curves into this PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()

    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    setting = QUICK if args.quick else Setting()
    if args.rl_steps:
        setting = replace(setting, rl_steps=args.rl_steps)
    bench = Bench(setting, args.cache, progress=not args.quiet)
    info = facts(with_torch=True)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    print(
        "scaled for this machine: " + "; ".join(f"{k} = {v[0]} ({v[1]})" for k, v in SCALING.items()),
        flush=True,
    )
    screening = bench.screening()
    if not screening["instances"]:
        print("no instance has sampled success in the band: nothing to train on")
        return 1
    # The start policy measured again, apart from the screening that chose the instances (whose
    # estimates are biased towards the band's middle: selected on their own noise).
    p = [v["sampled"] for v in bench.baseline()["scores"].values()]
    print(
        f"{len(p)} instances; smallest gain the interval can detect (80% power, {len(args.seeds)} "
        f"seed(s)): {detectable(p, setting.k, len(args.seeds), setting.rl_steps // setting.eval_every + 1):.3f}",
        flush=True,
    )
    if args.command in ("all", "run"):
        for arm in args.arms:
            for seed in args.seeds:
                bench.arm(arm, seed)
    if args.command in ("all", "table", "run"):
        summary = summarise(setting, bench.cached_arms())
        text = render(setting, screening, bench.baseline(), summary)
        print(text, end="")
        if args.json:
            write_json(
                args.json, {"machine": info, "setting": asdict(setting), "screening": screening, **summary}
            )
        if args.figure and summary["arms"]:
            print(f"figure: {picture(summary, args.figure)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
