"""Does training make the agent better? SFT, offline RL and semi-online RL on the simulated phone.

    .venv/bin/python benchmarks/learning.py               # everything missing, then the table (~2-3 h, 2 cores)
    .venv/bin/python benchmarks/learning.py initial       # only the initial model and its gate
    .venv/bin/python benchmarks/learning.py calibrate     # only the eta calibration
    .venv/bin/python benchmarks/learning.py run --arms sft offline --seeds 0   # some pieces
    .venv/bin/python benchmarks/learning.py table --json learning.json          # the table from the cache
    .venv/bin/python benchmarks/learning.py --quick       # a minute-scale run of every piece (CI)
    .venv/bin/python benchmarks/learning.py --dry-run     # the plan and what it needs; trains nothing

Every piece (the initial model, each calibration run, each arm x seed) is cached under ``--cache``
as soon as it is done, so the comparison can be run over several sittings; ``table`` assembles
whatever is there. The setting (sizes, update counts, rates, families) is part of each piece's cache key.

**The phone.** The ``learnable`` display profile (``devices.sim.display``): a 1.6x UI scale, at
most five rows per list, a coloured mark per item, list order drawn from the task's seed. The model
sees each screen at ``--image-tokens`` (128: 1080x2400 shrunk to 196x448 pixels).

**Families and splits.** ``CPU_FAMILIES`` are trained (all of ``FAMILIES`` with ``--gpu``: the
tiny model cannot read the two list families); ``CONTROL`` families are never trained by
anything and are a negative control (a gain there is not learning the trained tasks). Each trained
family has three disjoint sets of seeds: ``initial`` (the initial model's data), ``train`` (the
arms' data) and ``heldout`` (evaluation). A seed fixes the task's items and the order of every
list and Settings page; held-out seeds come from the held-out side of each family's split
(``devices.sim.tasks.splits``), so no held-out instance has the goal and expert actions of a trained
one: the target sits elsewhere, or the goal names something else (``splits.VARIES`` says what, per
family). In the two families whose next step depends on history (``add_several_to_cart``:
product x count, ``star_two_files``: a pair of files), one combination in four is also held out
entirely, each of its items being trained in others.

**Initial model.** The tiny Qwen2.5-VL built from config knows nothing, so the initial model is
SFT (with thoughts, the compact system prompt) on the ``initial`` seeds, checked every
``--gate-every`` steps until its grounding accuracy (click and long-press steps of the held-out
trajectories, expert history) reaches ``--gate`` (60%), or ``--gate-max-steps`` are spent. A model
that cannot read the screen cannot show what RL adds; then the run stops and says so
(``perception-bound``) instead of comparing methods on noise.

**The RL arms train what the product trains**: the nightly job's LoRA adapter (rank and alpha of
the ``rl:`` block of ``deploy/retrain.yaml``) at its learning rate, which the RL sanity check
(``benchmarks/rl_sanity.py``, BENCHMARKS.md section 5) measured against an lr-0 control; there is
no rate calibration here (an earlier one chose by clip fraction, which no working rate reached, and
so always took the top of its grid). SFT (a full fine-tune) keeps the initial model's rate.

**Calibration** is eta's alone: a short run per RL method (offline; semi-online eps 1) at eta 0 on
seed 0 records the spread of every group; eta is the paper's 0.3 unless that drops more than half
of the groups with any spread there; then the largest of 0.2, 0.1, 0.05 that keeps half.

**Arms**, each from the initial model for ``--updates`` optimiser updates (equal updates, not
equal seconds: an RL step is ``mini_batches`` updates, an SFT step one): ``sft``; ``offline`` (RL
with the expert's history: per-step GRPO, gamma 0, no episode term; dynamic sampling on any step's
advantage, since with gamma 0 the spread of R_0 sees step 0 only; history turns with the thoughts
stored with the data, since every one of its history turns is a patch); ``semi_eps0``,
``semi_eps1``, ``semi_epsinf`` (semi-online RL, patch threshold 0, 1, unlimited); ``sft+semi``
(half the updates SFT, then semi-online with eps 1). The paper-form reward (thoughts are trained).

**Measured** for the initial model and every arm x seed: SOP (PG, TSR: greedy, own history) on
the held-out trajectories, also on the history families alone; step and grounding accuracy with
the expert's history; online success of whole episodes on the held-out instances (a simulated
phone behind a real adb server); the same SOP and online success on the control families. The
training signal: optimiser updates, samples, groups kept and dropped, clip fraction, KL. The patch
module's own effect: samples trained at each step index, and how often a step after a rollout's
first mismatch still matched, in training and on the held-out trajectories.

**Refutation, stated before the run.** With the gate passed, the method is refuted at this scale
if the 95% interval of (semi-online eps 1 minus offline RL) in held-out SOP TSR lies below +0.10.
Intervals: a bootstrap over training seeds and task families together (paired by both; a family
is drawn with all its held-out trajectories, which pass or fail together more often than not).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from machine import facts
from pieces import product_rl, read_json, resize, setting_key, write_json

ROOT = Path(__file__).resolve().parent.parent

FAMILIES = (
    "wifi_on",
    "bluetooth_on",
    "airplane_mode_on",
    "dark_theme_on",
    "open_app",
    "favorite_contact",
    "add_to_cart",
    "star_file",
    "add_several_to_cart",
    "star_two_files",
)
# The CPU setting's families: the two where a name or product must be read off a list at 128
# image tokens (favorite_contact, add_several_to_cart) stayed at 0% grounding through 2100 SFT steps
# of the tiny model (BENCHMARKS.md section 5), so they are trained only in the GPU setting.
CPU_FAMILIES = tuple(f for f in FAMILIES if f not in ("favorite_contact", "add_several_to_cart"))
HISTORY = ("add_several_to_cart", "star_two_files")  # the next step depends on what was done
CONTROL = ("enable_alarm", "delete_file", "delete_contact")  # never trained
ARMS = ("sft", "offline", "semi_eps0", "semi_eps1", "semi_epsinf", "sft+semi")
SPLIT_START = {"initial": 100_000, "train": 0, "heldout": 50_000}  # where each split's seeds begin
ETA_STEPS = (0.3, 0.2, 0.1, 0.05)
# The differences reported besides the verdict's: each method against the initial model and SFT,
# and the patch threshold's own effect.
COMPARED = (
    ("sft", "initial"),
    ("offline", "initial"),
    ("semi_eps1", "initial"),
    ("semi_eps1", "sft"),
    ("semi_eps1", "offline"),
    ("sft+semi", "sft"),
    ("semi_eps1", "semi_eps0"),
    ("semi_epsinf", "semi_eps1"),
)
CALIBRATED = ("offline", "semi_eps1")  # the other semi-online arms use semi_eps1's rate
COMMANDS = ("all", "initial", "calibrate", "run", "table", "piece")
FORMAT = 4  # bump when a piece's meaning changes: older cached pieces are not reused
NIGHTLY = product_rl()  # the product's rl: block: the RL arms' adapter and rate


@dataclass(frozen=True)
class Setting:
    model_size: str = "tiny"
    image_tokens: int = 128
    display: str = "learnable"
    families: tuple[str, ...] = CPU_FAMILIES
    control: tuple[str, ...] = CONTROL
    initial_seeds: int = 24  # per family
    train_seeds: int = 8
    heldout_seeds: int = 4
    control_seeds: int = 4
    initial_lr: float = 1e-3
    batch_size: int = 8
    gate: float = 0.6
    gate_every: int = 300
    gate_max_steps: int = 3000
    updates: int = 32  # optimiser updates per arm (RL: steps x mini_batches)
    calibration_updates: int = 12
    rl_lr: float = float(NIGHTLY["optim"]["lr"])
    lora_rank: int = int(NIGHTLY["learner"]["lora"]["rank"])
    lora_alpha: int = int(NIGHTLY["learner"]["lora"]["alpha"])
    n: int = 4
    tasks_per_step: int = 4
    mini_batches: int = 2
    max_new_tokens: int = 112
    online_steps: int = 10
    device: str = "cpu"
    gate_enforced: bool = True

    def key(self) -> str:
        return setting_key(self, FORMAT)


QUICK = Setting(
    families=("open_app", "add_several_to_cart"),
    control=("enable_alarm",),
    initial_seeds=3,
    train_seeds=2,
    heldout_seeds=1,
    control_seeds=1,
    gate_every=2,
    gate_max_steps=2,
    updates=2,
    calibration_updates=2,
    n=2,
    tasks_per_step=2,
    max_new_tokens=16,
    online_steps=2,
    gate_enforced=False,
)


# One GPU (--gpu): the 10 M-parameter model at 256 image tokens, pieces side by
# side (--jobs 9: the 18 arm x seed pieces in two waves, each piece its own process). Planned to
# spend under 10 minutes of device time; see BENCHMARKS.md for the arithmetic.
GPU = Setting(
    families=FAMILIES,
    model_size="small",
    image_tokens=256,
    device="cuda",
    gate_every=500,
    gate_max_steps=3000,
    calibration_updates=8,
    n=8,
    tasks_per_step=8,
)


# -- data -----------------------------------------------------------------------------------------
def _combo(family: str, seed: int) -> str:
    from devices.sim.tasks import TASKS

    return json.dumps(TASKS[family].create(seed).params, sort_keys=True)


def held_combos(family: str) -> set[str]:
    """The item combinations of a history family that only the held-out split has (one in four)."""
    if family not in HISTORY:
        return set()
    combos = sorted({_combo(family, seed) for seed in range(500)})
    return {c for i, c in enumerate(combos) if i % 4 == 3}


def split_seeds(family: str, split: str, count: int, display: str = "learnable") -> list[int]:
    """``count`` seeds of ``family`` for a split: disjoint ranges; the held-out split only on the
    held-out side of the family's split (``devices.sim.tasks.splits``: no held-out instance has a
    trained one's goal and expert actions), and in a history family only its held-out combinations."""
    from devices.sim.tasks.splits import held_out

    if split == "control":  # never trained by anything: any instances
        return list(range(SPLIT_START["heldout"], SPLIT_START["heldout"] + count))
    held = held_combos(family)
    want = split == "heldout"
    seeds: list[int] = []
    seed = SPLIT_START[split]
    while len(seeds) < count:
        combo_ok = not held or (_combo(family, seed) in held) == want
        if combo_ok and held_out(family, seed, display) == want:
            seeds.append(seed)
        seed += 1
    return seeds


def sources(setting: Setting, split: str, families: Sequence[str] | None = None) -> list[dict[str, Any]]:
    count = {
        "initial": setting.initial_seeds,
        "train": setting.train_seeds,
        "heldout": setting.heldout_seeds,
        "control": setting.control_seeds,
    }[split]
    chosen = families or (setting.control if split == "control" else setting.families)
    return [
        {
            "kind": "sim",
            "tasks": [f],
            "seeds": split_seeds(f, split, count, setting.display),
            "display": setting.display,
        }
        for f in chosen
    ]


def trajectories(setting: Setting, split: str) -> list[Any]:
    from train.data import SimSource, load

    return load([SimSource.model_validate(s) for s in sources(setting, split)])


# -- training -------------------------------------------------------------------------------------
def learner(setting: Setting) -> dict[str, Any]:
    return {"device": setting.device}


def sft_config(setting: Setting, model: Path, out: Path, seed: int, split: str, **limits: Any) -> Any:
    from train.config import SFTConfig

    return SFTConfig.model_validate(
        {
            "model": model,
            "output_dir": out,
            "seed": seed,
            "thoughts": True,
            "system_prompt": "compact",
            "data": {"sources": sources(setting, split), "val_fraction": 0.0},
            "optim": {"lr": setting.initial_lr},
            "resize": resize(setting),
            "batch_size": setting.batch_size,
            "epochs": 10_000,
            "save_every": 1 << 20,
            "learner": learner(setting),
            **limits,
        }
    )


def rl_config(
    setting: Setting, model: Path, out: Path, seed: int, method: str, updates: int, eta: float
) -> Any:
    """The RL run of ``method`` for ``updates`` optimiser updates, with the product's adapter and rate."""
    from train.config import RLConfig

    rollout: dict[str, Any] = {"n": setting.n, "max_new_tokens": setting.max_new_tokens, "reward": "paper"}
    advantage: dict[str, Any] = {}
    sampling: dict[str, Any] = {"enabled": True, "eta": eta, "max_extra_draws": 4 * setting.tasks_per_step}
    if method == "offline":
        rollout["history"] = "expert"
        rollout["patch"] = {"mode": "off_policy_thought"}  # its history is all patches: SFT's form
        advantage = {"gamma": 0.0, "episode": "none"}
        sampling["signal"] = "any_step"  # with gamma 0, R_0's spread sees step 0 only
    else:
        rollout["patch"] = {"threshold": {"semi_eps0": 0, "semi_epsinf": -1}.get(method, 1)}
    return RLConfig.model_validate(
        {
            "model": model,
            "output_dir": out,
            "seed": seed,
            "system_prompt": "compact",
            "data": {"sources": sources(setting, "train"), "val_fraction": 0.0},
            "rollout": rollout,
            "advantage": advantage,
            "dynamic_sampling": sampling,
            "optim": {"lr": setting.rl_lr},
            "resize": resize(setting),
            "tasks_per_step": setting.tasks_per_step,
            "mini_batches": setting.mini_batches,
            "max_steps": max(1, updates // setting.mini_batches),
            "epochs": 10_000,
            "save_every": 1 << 20,
            "eval_every": None,
            "log_entropy": False,
            "learner": {
                **learner(setting),
                "lora": {"rank": setting.lora_rank, "alpha": setting.lora_alpha},
            },
        }
    )


def signal(run: Path, kind: str, mini_batches: int) -> dict[str, Any]:
    """What a run trained: steps, updates, samples, seconds, and for RL groups kept and dropped,
    clip fraction, KL, samples per step index and the matches after a first mismatch."""
    from train.tracking import read_metrics

    rows = read_metrics(run)
    if kind == "sft":
        return {
            "steps": len(rows),
            "updates": len(rows),
            "samples": sum(len(r["examples"]) for r in rows),
            "seconds": sum(r["prepare_s"] + r["update_s"] for r in rows),
        }
    at_step: list[int] = []
    for row in rows:
        for i, count in enumerate(row.get("samples_at_step", [])):
            at_step.extend([0] * (i + 1 - len(at_step)))
            at_step[i] += count
    spreads = [s for r in rows for s in r.get("spreads", []) if s is not None]
    return {
        "steps": len(rows),
        "updates": sum(mini_batches for r in rows if r["samples"]),
        "samples": sum(r["samples"] for r in rows),
        "seconds": sum(
            r["rollout_s"] + r["old_logprob_s"] + r["ref_logprob_s"] + r["update_s"] for r in rows
        ),
        "groups_kept": sum(r["groups"] for r in rows),
        "groups_dropped": sum(r["groups_dropped"] for r in rows),
        "clip_fraction": statistics.fmean(r["clip_fraction"] for r in rows) if rows else 0.0,
        "kl": statistics.fmean(r["kl"] for r in rows) if rows else 0.0,
        "reward": statistics.fmean(r["reward"] for r in rows) if rows else 0.0,
        "samples_at_step": at_step,
        "after_mistake": [sum(r.get("after_mistake", [0, 0])[i] for r in rows) for i in (0, 1)],
        "spreads": spreads,
    }


def merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    out = dict(second)
    for key in ("steps", "updates", "samples", "seconds"):
        out[key] = first[key] + second[key]
    out["sft_steps"] = first["steps"]
    return out


# -- evaluation -----------------------------------------------------------------------------------
def engine_for(setting: Setting, checkpoint: Path) -> tuple[Any, Any]:
    """A greedy in-process engine on a checkpoint (full, or an RL arm's adapter on its base), and
    the prompt it was trained with."""
    from agent.checkpoint import checkpoint_system_prompt
    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings
    from train.checkpoints import model_and_adapter
    from train.model import PolicyModel
    from train.rollout import TransformersEngine

    base, adapter = model_and_adapter(checkpoint)
    prompt = PromptSettings(
        resize=ResizeSettings(**resize(setting)), system_prompt=checkpoint_system_prompt(base, adapter)
    )
    model = PolicyModel(base, adapter_dir=adapter, prompt=prompt, device=setting.device)
    return TransformersEngine(model, seed=0), prompt


def evaluate(setting: Setting, checkpoint: Path, heldout: list[Any], control: list[Any]) -> dict[str, Any]:
    """SOP, step accuracy and online success of a checkpoint on the held-out and control data."""
    from agent.local_policy import LocalPolicy
    from train.evaluate import sop
    from train.online import OnlineSettings, online_success

    engine, prompt = engine_for(setting, checkpoint)
    out: dict[str, Any] = {}
    for name, data in (("heldout", heldout), ("control", control)):
        result = sop(engine, data, prompt=prompt, max_new_tokens=setting.max_new_tokens)
        names = {t.id: t.source for t in data}
        out[name] = {
            "pg": result["pg"],
            "tsr": result["tsr"],
            # keyed by source (sim:FAMILY:SEED), the same for every arm and seed
            "per_trajectory": {names[r["id"]]: [r["matched"], r["steps"]] for r in result["per_trajectory"]},
        }
    out["heldout"].update(step_accuracy(engine, heldout, prompt, setting.max_new_tokens))
    from train.checkpoints import model_and_adapter

    base, adapter = model_and_adapter(checkpoint)
    policy = LocalPolicy(base, adapter_dir=adapter, prompt=prompt, device=setting.device)
    for name, split in (("heldout", "heldout"), ("control", "control")):
        episodes = []
        for source in sources(setting, split):
            online = OnlineSettings(
                tasks=source["tasks"],
                seeds=source["seeds"],
                max_steps=setting.online_steps,
                max_new_tokens=setting.max_new_tokens,
                display=setting.display,
            )
            episodes += online_success(policy, online, prompt=prompt)["episodes"]
        out[name]["online"] = sum(e["success"] for e in episodes) / len(episodes) if episodes else 0.0
        out[name]["online_episodes"] = {f"{e['task']}:{e['seed']}": bool(e["success"]) for e in episodes}
    return out


def step_accuracy(engine: Any, data: list[Any], prompt: Any, max_new_tokens: int) -> dict[str, Any]:
    """Greedy, every mismatch patched with the expert's action (the history is the expert's where
    the model erred): accuracy per step, on grounding steps, and after a trajectory's first mistake."""
    from train.model import Sampling
    from train.rollout import RolloutSettings, SemiOnlineRollout

    roller = SemiOnlineRollout(
        engine, RolloutSettings(n=1, temperature=0.0, max_new_tokens=max_new_tokens), prompt=prompt
    )
    greedy = Sampling(temperature=0.0, max_new_tokens=max_new_tokens)
    steps, grounding, after = [0, 0], [0, 0], [0, 0]
    for trajectory in data:
        (rollout,) = roller.run(trajectory, n=1, sampling=greedy, threshold=-1)
        first = rollout.matched_steps
        for i, record in enumerate(rollout.steps):
            hit = int(record.matched)
            steps[0] += hit
            steps[1] += 1
            if trajectory.steps[i].expert.action in ("click", "long_press"):
                grounding[0] += hit
                grounding[1] += 1
            if i > first:
                after[0] += hit
                after[1] += 1
    return {
        "step_accuracy": steps[0] / max(steps[1], 1),
        "grounding_accuracy": grounding[0] / max(grounding[1], 1),
        "after_mistake": after,
    }


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

    # the initial model
    def initial(self) -> dict[str, Any]:
        """The initial model, SFT until the gate (cached): its gate record and evaluation."""
        done = read_json(self.home / "initial.json")
        if done is not None:
            return done
        from agent.devkit.tiny_model import MODEL_SIZES, ensure_tiny_model
        from train.checkpoints import latest_checkpoint
        from train.sft import train_sft

        s = self.setting
        random_model = ensure_tiny_model(self.cache / "models", MODEL_SIZES[s.model_size])
        run_dir = self.home / "initial-run"
        heldout, control = trajectories(s, "heldout"), trajectories(s, "control")
        # The checks so far, kept as they are made: a run stopped between them goes on from its
        # last checkpoint (the SFT run resumes from it); one stopped after the deciding check only
        # writes the record below.
        progress = self.home / "initial-checks.json"
        checks: list[dict[str, Any]] = (read_json(progress) or {}).get("checks", [])
        decided = bool(checks) and (
            checks[-1]["grounding_accuracy"] >= s.gate or checks[-1]["steps"] >= s.gate_max_steps
        )
        started = time.perf_counter()

        def check(step: int) -> bool:
            """The gate check of the checkpoint just saved: true ends the SFT run."""
            checkpoint = latest_checkpoint(run_dir)
            assert checkpoint is not None
            engine, prompt = engine_for(s, checkpoint)
            result = step_accuracy(engine, heldout, prompt, s.max_new_tokens)
            checks.append({"steps": step, **result})
            write_json(progress, {"checks": checks})
            self.say(
                f"  step {step}: held-out grounding accuracy {result['grounding_accuracy']:.3f}, "
                f"step accuracy {result['step_accuracy']:.3f}"
            )
            return bool(result["grounding_accuracy"] >= s.gate)

        if not decided:
            self.say(
                f"initial model: SFT on {len(s.families)} families x {s.initial_seeds} seeds, "
                f"checked every {s.gate_every} steps (at most {s.gate_max_steps})"
            )
            config = sft_config(
                s, random_model, run_dir, 0, "initial", max_steps=s.gate_max_steps, save_every=s.gate_every
            )
            train_sft(config, progress=self.progress, after_save=check)
        checkpoint = latest_checkpoint(run_dir)
        assert checkpoint is not None
        model = self.home / "initial-model"
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(checkpoint, model)
        passed = checks[-1]["grounding_accuracy"] >= s.gate
        record = {
            "passed": passed,
            "gate": s.gate,
            "checks": checks,
            "model": str(model),
            "train_seconds": time.perf_counter() - started,
            "evaluation": evaluate(s, model, heldout, control),
        }
        write_json(self.home / "initial.json", record)
        shutil.rmtree(run_dir, ignore_errors=True)
        return record

    def gate_or_stop(self) -> dict[str, Any]:
        record = self.initial()
        if not record["passed"] and self.setting.gate_enforced:
            last = record["checks"][-1]
            raise SystemExit(
                f"perception-bound: after {last['steps']} SFT steps the initial model grounds "
                f"{last['grounding_accuracy']:.0%} of held-out clicks (gate {self.setting.gate:.0%}); "
                "comparing training methods on it would measure noise. Use a larger model "
                "(--model-size small) or more image tokens."
            )
        return record

    # calibration
    def calibration_piece(self, method: str) -> dict[str, Any]:
        """A short RL run of ``method`` on seed 0 (eta 0: every group with any spread is kept, and
        the spreads are recorded for choosing eta)."""
        path = self.home / "calibration" / f"{method}.json"
        piece = read_json(path)
        if piece is not None:
            return piece
        from train.rl import train_rl

        s = self.setting
        model = Path(self.gate_or_stop()["model"])
        self.say(f"calibration: {method}, {s.calibration_updates} updates")
        with tempfile.TemporaryDirectory(prefix="calibrate-", dir=self.cache) as tmp:
            config = rl_config(s, model, Path(tmp) / "rl", 0, method, s.calibration_updates, 0.0)
            piece = {
                "method": method,
                "lr": s.rl_lr,
                **signal(train_rl(config, progress=self.progress), "rl", s.mini_batches),
            }
        write_json(path, piece)
        return piece

    def calibration(self) -> dict[str, Any]:
        """eta, from the calibration runs (each cached)."""
        runs = {m: self.calibration_piece(m) for m in CALIBRATED}
        spreads = [x for r in runs.values() for x in r["spreads"]]
        return {"eta": choose_eta(spreads), "runs": runs}

    def lr_of(self, arm: str) -> float:
        return self.setting.initial_lr if arm == "sft" else self.setting.rl_lr

    # arms
    def arm(self, arm: str, seed: int) -> dict[str, Any]:
        path = self.home / "arms" / f"{arm}-seed{seed}.json"
        done = read_json(path)
        if done is not None:
            return done
        from train.checkpoints import latest_checkpoint
        from train.rl import train_rl
        from train.sft import train_sft

        s = self.setting
        record = self.gate_or_stop()
        calibration = self.calibration()
        model = Path(record["model"])
        lr, eta = self.lr_of(arm), calibration["eta"]
        self.say(
            f"arm {arm}, seed {seed}: {s.updates} updates"
            + ("" if arm == "sft" else f", lr {lr:g}, eta {eta:g}")
        )
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"arm-{arm}-", dir=self.cache) as tmp:
            work = Path(tmp)
            if arm == "sft":
                run = train_sft(
                    sft_config(s, model, work / "sft", seed, "train", max_steps=s.updates),
                    progress=self.progress,
                )
                trained = signal(run, "sft", 1)
            elif arm == "sft+semi":
                first = train_sft(
                    sft_config(s, model, work / "sft", seed, "train", max_steps=max(1, s.updates // 2)),
                    progress=self.progress,
                )
                middle = latest_checkpoint(first)
                assert middle is not None
                lr = self.lr_of("semi_eps1")
                run = train_rl(
                    rl_config(s, middle, work / "rl", seed, "semi_eps1", max(1, s.updates // 2), eta),
                    progress=self.progress,
                )
                trained = merged(signal(first, "sft", 1), signal(run, "rl", s.mini_batches))
            else:
                run = train_rl(
                    rl_config(s, model, work / "rl", seed, arm, s.updates, eta), progress=self.progress
                )
                trained = signal(run, "rl", s.mini_batches)
            checkpoint = latest_checkpoint(run)
            assert checkpoint is not None
            scores = evaluate(s, checkpoint, trajectories(s, "heldout"), trajectories(s, "control"))
        piece = {
            "arm": arm,
            "seed": seed,
            "lr": lr,
            "eta": eta,
            "training": trained,
            "evaluation": scores,
            "wall_seconds": time.perf_counter() - started,
        }
        write_json(path, piece)
        h = scores["heldout"]
        self.say(
            f"  {arm} seed {seed}: held-out SOP TSR {h['tsr']:.3f}, PG {h['pg']:.3f}, online {h['online']:.3f}; "
            f"{trained['updates']} updates in {trained['seconds']:.0f} s"
        )
        return piece

    def cached_arms(self) -> list[dict[str, Any]]:
        return [
            p for path in sorted((self.home / "arms").glob("*.json")) if (p := read_json(path)) is not None
        ]


def choose_eta(spreads: Sequence[float]) -> float:
    """The paper's eta unless it drops more than half of the groups with any spread; then the
    largest smaller step that keeps half."""
    live = [x for x in spreads if x > 0]
    if not live:
        return ETA_STEPS[0]
    for eta in ETA_STEPS:
        if sum(x > eta for x in live) >= len(live) / 2:
            return eta
    return ETA_STEPS[-1]


# -- the table ------------------------------------------------------------------------------------
def bootstrap(
    values: dict[int, dict[str, float]], reps: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and 95% interval of per-trajectory values keyed by training seed, resampling seeds and
    task families, each drawn family with all its held-out trajectories (the same draws for every
    quantity compared with this seed).

    Families, not trajectories, are the unit: the held-out instances of one family pass or fail
    together far more often than not (the per-family table in BENCHMARKS.md), so resampling them
    one by one would count four correlated outcomes as four independent ones.
    """
    rng = random.Random(seed)
    seeds = sorted(values)
    ids = sorted(set.intersection(*(set(v) for v in values.values()))) if values else []
    if not ids:
        return (0.0, 0.0, 0.0)
    families: dict[str, list[str]] = {}
    for i in ids:
        families.setdefault(family_of_id(i), []).append(i)
    groups = [families[f] for f in sorted(families)]
    mean = statistics.fmean(values[s][i] for s in seeds for i in ids)
    draws = []
    for _ in range(reps):
        picked = [rng.choice(seeds) for _ in seeds]
        chosen = [i for _ in groups for i in rng.choice(groups)]
        draws.append(statistics.fmean(values[s][i] for s in picked for i in chosen))
    draws.sort()
    return mean, draws[int(0.025 * reps)], draws[int(0.975 * reps) - 1]


def per_trajectory(piece: dict[str, Any], split: str, metric: str) -> dict[str, float]:
    rows = piece["evaluation"][split]["per_trajectory"]
    if metric == "tsr":
        return {i: float(m == n) for i, (m, n) in rows.items()}
    return {i: m / n for i, (m, n) in rows.items()}


def summarise(
    setting: Setting, initial: dict[str, Any] | None, pieces: list[dict[str, Any]]
) -> dict[str, Any]:
    arms: dict[str, list[dict[str, Any]]] = {}
    for piece in pieces:
        arms.setdefault(piece["arm"], []).append(piece)
    rows: dict[str, Any] = {}
    for arm in [a for a in ARMS if a in arms]:
        runs = arms[arm]
        row: dict[str, Any] = {"seeds": sorted(r["seed"] for r in runs)}
        for split, metric in (("heldout", "tsr"), ("heldout", "pg"), ("control", "tsr")):
            row[f"{split}_{metric}"] = bootstrap({r["seed"]: per_trajectory(r, split, metric) for r in runs})
        history_ids = {
            i for i in runs[0]["evaluation"]["heldout"]["per_trajectory"] if family_of_id(i) in HISTORY
        }
        row["history_tsr"] = bootstrap(
            {
                r["seed"]: {i: v for i, v in per_trajectory(r, "heldout", "tsr").items() if i in history_ids}
                for r in runs
            }
        )
        for key in ("online", "step_accuracy", "grounding_accuracy"):
            row[key] = statistics.fmean(r["evaluation"]["heldout"][key] for r in runs)
        row["control_online"] = statistics.fmean(r["evaluation"]["control"]["online"] for r in runs)
        after = [sum(r["evaluation"]["heldout"]["after_mistake"][i] for r in runs) for i in (0, 1)]
        row["heldout_after_mistake"] = after[0] / after[1] if after[1] else None
        train = [r["training"] for r in runs]
        for key in ("updates", "samples", "seconds", "groups_kept", "groups_dropped", "clip_fraction", "kl"):
            if all(key in t for t in train):
                row[key] = statistics.fmean(t[key] for t in train)
        if all("samples_at_step" in t for t in train):
            width = max(len(t["samples_at_step"]) for t in train)
            row["samples_at_step"] = [
                sum(t["samples_at_step"][i] if i < len(t["samples_at_step"]) else 0 for t in train)
                / len(train)
                for i in range(width)
            ]
            done = [sum(t["after_mistake"][i] for t in train) for i in (0, 1)]
            row["train_after_mistake"] = done[0] / done[1] if done[1] else None
        row["lr"], row["eta"] = runs[0]["lr"], runs[0]["eta"]
        rows[arm] = row
    comparisons: dict[str, Any] = {}
    for first, second in COMPARED:
        if first in arms and (second in arms or (second == "initial" and initial is not None)):
            comparisons[f"{first} - {second}"] = difference(arms, initial, first, second)
    verdict = None
    if (ruled := comparisons.get("semi_eps1 - offline")) is not None:  # the refutation rule's difference
        passed = bool(initial and initial["passed"])
        verdict = {
            "semi_eps1_minus_offline_tsr": ruled["tsr"],
            "gate_passed": passed,
            "refuted": passed and ruled["tsr"][2] < 0.10,
            "seeds": ruled["seeds"],
        }
    return {"initial": initial_row(initial), "arms": rows, "comparisons": comparisons, "verdict": verdict}


def difference(
    arms: dict[str, list[dict[str, Any]]], initial: dict[str, Any] | None, first: str, second: str
) -> dict[str, Any]:
    """Held-out SOP TSR of ``first`` minus ``second`` (an arm, or the initial model, which has no
    training seed): mean and 95% interval, paired by training seed and task family."""
    a = {r["seed"]: per_trajectory(r, "heldout", "tsr") for r in arms[first]}
    if second == "initial":
        assert initial is not None
        start = per_trajectory(initial, "heldout", "tsr")
        b = dict.fromkeys(a, start)
    else:
        b = {r["seed"]: per_trajectory(r, "heldout", "tsr") for r in arms[second]}
    common = sorted(set(a) & set(b))
    return {
        "tsr": bootstrap({s: {i: a[s][i] - b[s][i] for i in a[s] if i in b[s]} for s in common}),
        "seeds": common,
    }


def family_of_id(trajectory_id: str) -> str:
    parts = trajectory_id.split(":")
    return parts[1] if len(parts) > 2 else trajectory_id


def initial_row(initial: dict[str, Any] | None) -> dict[str, Any] | None:
    if initial is None:
        return None
    e = initial["evaluation"]
    return {
        "passed": initial["passed"],
        "checks": initial["checks"],
        "heldout_tsr": e["heldout"]["tsr"],
        "heldout_pg": e["heldout"]["pg"],
        "online": e["heldout"]["online"],
        "control_tsr": e["control"]["tsr"],
        "control_online": e["control"]["online"],
        "step_accuracy": e["heldout"]["step_accuracy"],
        "grounding_accuracy": e["heldout"]["grounding_accuracy"],
    }


def render(summary: dict[str, Any]) -> str:
    from rich.console import Console
    from rich.table import Table

    def ci(v: Sequence[float]) -> str:
        return f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"

    scores = Table(title="held-out instances (95% intervals over training seeds x task families)")
    for col in (
        "arm",
        "SOP TSR",
        "SOP PG",
        "history TSR",
        "online",
        "step acc",
        "control TSR",
        "control online",
    ):
        scores.add_column(col, justify="left" if col == "arm" else "right")
    init = summary["initial"]
    if init:
        scores.add_row(
            "initial",
            f"{init['heldout_tsr']:.2f}",
            f"{init['heldout_pg']:.2f}",
            "",
            f"{init['online']:.2f}",
            f"{init['step_accuracy']:.2f}",
            f"{init['control_tsr']:.2f}",
            f"{init['control_online']:.2f}",
        )
    for arm, r in summary["arms"].items():
        scores.add_row(
            arm,
            ci(r["heldout_tsr"]),
            ci(r["heldout_pg"]),
            ci(r["history_tsr"]),
            f"{r['online']:.2f}",
            f"{r['step_accuracy']:.2f}",
            ci(r["control_tsr"]),
            f"{r['control_online']:.2f}",
        )
    signal_table = Table(title="training signal (mean per seed)")
    for col in (
        "arm",
        "lr",
        "eta",
        "updates",
        "samples",
        "kept/dropped",
        "clip",
        "KL",
        "samples by step index",
        "match after 1st miss (train / held-out)",
    ):
        signal_table.add_column(col, justify="left" if col == "arm" else "right")
    for arm, r in summary["arms"].items():
        kept = f"{r['groups_kept']:.0f}/{r['groups_dropped']:.0f}" if "groups_kept" in r else "-"
        by_step = " ".join(f"{x:.0f}" for x in r.get("samples_at_step", [])) or "-"
        train_after = r.get("train_after_mistake")
        held_after = r.get("heldout_after_mistake")
        after = (
            (f"{train_after:.2f}" if train_after is not None else "-")
            + " / "
            + (f"{held_after:.2f}" if held_after is not None else "-")
        )
        signal_table.add_row(
            arm,
            f"{r['lr']:g}",
            f"{r['eta']:g}" if arm != "sft" else "-",
            f"{r['updates']:.0f}",
            f"{r['samples']:.0f}",
            kept,
            f"{r.get('clip_fraction', 0):.3f}" if kept != "-" else "-",
            f"{r.get('kl', 0):.1e}" if kept != "-" else "-",
            by_step,
            after,
        )
    console = Console(width=160, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(scores)
    console.print(signal_table)
    text = console.export_text()
    for name, d in summary.get("comparisons", {}).items():
        text += f"{name}, held-out SOP TSR: {ci(d['tsr'])} over seeds {d['seeds']}\n"
    verdict = summary["verdict"]
    if verdict:
        d = verdict["semi_eps1_minus_offline_tsr"]
        text += (
            f"semi-online (eps 1) minus offline RL, held-out SOP TSR: {ci(d)} over seeds {verdict['seeds']}; "
            + (
                "refuted at this scale (the interval lies below +0.10)"
                if verdict["refuted"]
                else "not refuted"
                if verdict["gate_passed"]
                else "no verdict: the gate was not passed"
            )
            + "\n"
        )
    return text


# -- running --------------------------------------------------------------------------------------


def needs() -> list[str]:
    """What this benchmark needs that may be missing: packages and the fonts the phone draws with."""
    missing = [
        p
        for p in ("torch", "transformers", "peft", "rich", "adbutils")
        if importlib.util.find_spec(p) is None
    ]
    from PIL import ImageFont

    from devices.sim.render import FONT_FILES

    if not any(_has_font(ImageFont, name) for name in FONT_FILES):
        missing.append("DejaVu Sans (Debian: fonts-dejavu-core): without it list marks and icons are boxes")
    return missing


def _has_font(image_font: Any, name: str) -> bool:
    try:
        image_font.truetype(name, 12)
    except OSError:
        return False
    return True


def dry_run(bench: Bench, args: argparse.Namespace) -> str:
    """The plan: the setting, the splits, the pieces still to run, and what is missing here."""
    s = bench.setting
    lines = [f"setting {s.key()} (cache {bench.home}):"]
    lines += [f"  {k} = {v}" for k, v in asdict(s).items() if k not in ("families", "control")]
    for split in ("initial", "train", "heldout", "control"):
        chosen = sources(s, split)
        seeds = sum(len(c["seeds"]) for c in chosen)
        lines.append(
            f"  {split}: {len(chosen)} families, {seeds} instances: "
            + ", ".join(f"{c['tasks'][0]} {c['seeds'][:3]}" for c in chosen)
        )
    todo = [m for m in CALIBRATED if read_json(bench.home / "calibration" / f"{m}.json") is None]
    arms = [
        f"{a}:{seed}"
        for a, seed in pieces(args)
        if read_json(bench.home / "arms" / f"{a}-seed{seed}.json") is None
    ]
    initial = (
        "cached"
        if read_json(bench.home / "initial.json")
        else f"to build (checked every {s.gate_every} steps)"
    )
    lines.append(f"initial model: {initial}")
    lines.append(f"calibration runs to do ({s.calibration_updates} updates each): {' '.join(todo) or 'none'}")
    lines.append(
        f"arm x seed pieces to do ({s.updates} updates each, {args.jobs} at a time): "
        f"{' '.join(arms) or 'none'}"
    )
    missing = needs()
    lines.append("missing: " + ("; ".join(missing) if missing else "nothing"))
    import torch

    if s.device.startswith("cuda") and not torch.cuda.is_available():
        lines.append("note: no CUDA device here; this plan runs where torch.cuda.is_available()")
    return "\n".join(lines) + "\n"


def pieces(args: argparse.Namespace) -> list[tuple[str, int]]:
    """Seed by seed, so that a run cut short leaves every arm compared on the first seeds."""
    return [(arm, seed) for seed in args.seeds for arm in args.arms]


def run_pieces(bench: Bench, args: argparse.Namespace) -> None:
    """The missing calibration runs, then the missing arm x seed pieces, ``--jobs`` at a time
    (each in its own process, as on a GPU several fit side by side)."""
    bench.gate_or_stop()
    calibrations = [
        ("calibration", m, "")
        for m in CALIBRATED
        if read_json(bench.home / "calibration" / f"{m}.json") is None
    ]
    arms = [
        ("arm", a, str(s))
        for a, s in pieces(args)
        if read_json(bench.home / "arms" / f"{a}-seed{s}.json") is None
    ]
    for wave in (calibrations, arms):
        if args.jobs <= 1 or len(wave) <= 1:
            for kind, name, value in wave:
                run_piece(bench, kind, name, value)
            continue
        from concurrent.futures import ThreadPoolExecutor

        def one(piece: tuple[str, str, str]) -> int:
            cmd = [
                sys.executable,
                __file__,
                "piece",
                "--piece",
                ":".join(piece),
                "--quiet",
                *args.passthrough,
            ]
            return subprocess.run(cmd, check=False).returncode

        with ThreadPoolExecutor(args.jobs) as pool:
            failed = [p for p, rc in zip(wave, pool.map(one, wave), strict=True) if rc != 0]
        if failed:
            raise SystemExit(f"pieces failed: {failed}; run again to see why (finished pieces are kept)")


def run_piece(bench: Bench, kind: str, name: str, value: str) -> None:
    if kind == "calibration":
        bench.calibration_piece(name)
    else:
        bench.arm(name, int(value))


def setting_from(args: argparse.Namespace) -> Setting:
    base = QUICK if args.quick else GPU if args.gpu else Setting()
    updates = {
        k: getattr(args, k)
        for k in (
            "model_size",
            "image_tokens",
            "updates",
            "device",
            "initial_lr",
            "gate_every",
            "gate_max_steps",
        )
        if getattr(args, k) is not None
    }
    return replace(base, **updates)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", nargs="?", default="all", choices=COMMANDS)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds")
    parser.add_argument("--quick", action="store_true", help="a minute-scale setting of every piece (CI)")
    parser.add_argument(
        "--gpu", action="store_true", help="the one-GPU setting (small model, 256 image tokens)"
    )
    parser.add_argument("--model-size", choices=("tiny", "small"))
    parser.add_argument("--image-tokens", type=int, help="image tokens per screenshot at most (default 128)")
    parser.add_argument("--updates", type=int, help="optimiser updates per arm and seed (default 32)")
    parser.add_argument("--device", help="cpu (default) or cuda")
    parser.add_argument(
        "--initial-lr", type=float, help="the initial model's SFT learning rate (default 1e-3)"
    )
    parser.add_argument("--gate-every", type=int, help="SFT steps between gate checks (default 300)")
    parser.add_argument("--gate-max-steps", type=int, help="SFT steps at most for the gate (default 3000)")
    parser.add_argument("--jobs", type=int, default=1, help="arm x seed pieces run side by side (GPU)")
    parser.add_argument("--threads", type=int, help="torch threads per process (default: torch's)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "learning")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and what is missing; train nothing"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--piece", help=argparse.SUPPRESS)  # one piece, for --jobs: KIND:NAME:VALUE
    args = parser.parse_args()
    args.passthrough = _without(
        [a for a in sys.argv[1:] if a not in COMMANDS],
        ("--arms", "--seeds", "--jobs", "--json", "--piece", "--quiet"),
    )

    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    setting = setting_from(args)
    bench = Bench(setting, args.cache, progress=not args.quiet)
    info = facts(with_torch=True)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    if args.dry_run:
        print(dry_run(bench, args), end="")
        return 1 if needs() else 0
    if args.command == "piece":
        run_piece(bench, *args.piece.split(":"))
        return 0
    if args.command in ("all", "initial"):
        bench.gate_or_stop()
    if args.command in ("all", "calibrate"):
        calibration = bench.calibration()
        print(
            f"calibration: eta {calibration['eta']:g}; the RL arms' rate {bench.setting.rl_lr:g} "
            f"(the nightly job's, deploy/retrain.yaml), SFT's {bench.setting.initial_lr:g}",
            flush=True,
        )
    if args.command in ("all", "run"):
        run_pieces(bench, args)
    if args.command in ("all", "table"):
        initial = read_json(bench.home / "initial.json")
        summary = summarise(setting, initial, bench.cached_arms())
        if initial is None:
            checks = (read_json(bench.home / "initial-checks.json") or {}).get("checks", [])
            done = ", ".join(f"{c['grounding_accuracy']:.3f} at {c['steps']}" for c in checks) or "none yet"
            print(
                f"the initial model is not built yet; held-out grounding accuracy so far: {done} "
                f"(gate {setting.gate:.0%}); run `learning.py` to go on"
            )
        elif not initial["passed"]:
            print(
                "perception-bound: the initial model did not pass the gate; no arm is compared"
                if setting.gate_enforced
                else "the initial model did not pass the gate (not enforced here)"
            )
        if args.json:
            write_json(args.json, {"machine": info, "setting": asdict(setting), **summary})
        if not summary["arms"]:
            print("no arm has run yet")
            return 0
        print(render(summary), end="")
    return 0


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` less the given options and their values."""
    out: list[str] = []
    skipping = False
    for item in argv:
        if item in options:
            skipping = True
            continue
        if skipping and not item.startswith("--"):
            continue
        skipping = False
        out.append(item)
    return out


if __name__ == "__main__":
    sys.exit(main())
