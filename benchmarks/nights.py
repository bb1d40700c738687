"""Nights: does the product's own loop make the agent better, night after night, on instances no
night's traffic contained?

    .venv/bin/python benchmarks/nights.py                  # every missing piece, then the table (~1 h, 2 cores)
    .venv/bin/python benchmarks/nights.py run --arms nightly --seeds 0   # some pieces
    .venv/bin/python benchmarks/nights.py table --json n.json --figure n.png   # from the cache
    .venv/bin/python benchmarks/nights.py --quick          # a minute-scale run of every piece (CI)
    .venv/bin/python benchmarks/nights.py --dry-run        # the plan, the power and the rule; runs nothing

**The loop as a user runs it.** Per arm and seed, the service (``serve``, in-process policy) runs on
a fleet of simulated phones behind a real adb server. Every night: traffic through the API (each
family's new instances, from the trained side of its split: ``devices.sim.tasks.splits``), each
checked on its phone and labelled by the checker; the scripted person of the demo corrects every
failure through the takeover API and labels it; then ``POST /v1/jobs`` runs the retraining job,
the service gates the candidate and hot-swaps it in. After every night the serving version is
scored on the **held-out instances** (the held-out side of each family's split: the rows to tap
elsewhere, another app named; ``splits.VARIES``), which no night's traffic and no training contains.

**Arms.** ``nightly``: the product's job, ``deploy/retrain.yaml`` as it is (its stages and ``rl:``
block), with the scalings of ``SCALING`` for a 0.8 M-parameter model on a CPU; ``sft``: the same
job with ``stages: [sft]``; ``sft+rl``: ``[sft, rl]``; ``off``: retraining off (the control: its
weights never move, so its held-out success is the starter's, measured once per seed and used for
every night). Every arm starts each seed from the same starter (``uis1 train sft`` on the trained
side of every family, as the demo's starter is built).

**Refutation, stated before the run**: the nightly job is not shown to make the agent better if, by
the last night, the 95% interval of (nightly - off) in held-out success includes 0 or lies below it.
Intervals: a bootstrap over held-out instances and seeds together, paired by instance. The smallest
gain that interval can detect (80% power) is printed before any arm runs.

Every piece (the starter, its evaluation, each arm x seed x night) is cached under ``--cache`` when
it is done; a stopped run goes on from the last finished night of each arm and seed (the service's
database and the retraining job's files stay in the piece's folder).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from machine import facts
from pieces import ROOT, bootstrap_gain, deep_merge, dotted, read_json, resize, setting_key, write_json

ARMS = ("nightly", "sft", "sft+rl", "off")
STAGES: dict[str, list[str] | None] = {"nightly": None, "sft": ["sft"], "sft+rl": ["sft", "rl"], "off": None}
FORMAT = 1  # bump when a piece's meaning changes

# What the product's job (deploy/retrain.yaml) changes here, and why: the scalings, all of them.
SCALING: dict[str, tuple[Any, str]] = {
    "rl.learner.backend": ("torch", "DeepSpeed's CPU path makes the same update, slower"),
    "rl.learner.dtype": ("float32", "bf16 on a CPU is ~20x slower"),
    "rl.learner.gradient_checkpointing": (False, "the tiny model fits"),
    "rl.learner.micro_batch": (1, "one sample per pass is fastest on a CPU"),
    "rl.learner.device": ("cpu", "no GPU here"),
    "rl.max_seconds": (None, "nights stop after a number of steps, not seconds"),
    "rl.epochs": (100_000, "as above"),
    "min_new_episodes": (1, "a night's traffic here is a few dozen episodes, not a phone fleet's"),
    "curation.holdout_fraction": (0.0, "too few episodes to hold a tenth out; the gate runs online"),
    "evaluation.holdout": (False, "as above"),
}


@dataclass(frozen=True)
class Setting:
    families: tuple[str, ...] = ("wifi_on", "bluetooth_on", "airplane_mode_on", "dark_theme_on", "open_app")
    display: str = "learnable"
    image_tokens: int = 128
    starter_instances: int = 24  # per family, trained side, from seed 100
    starter_steps: int = 600
    lr: float = 1e-3  # the starter's and the sft stage's (a full fine-tune of the tiny model)
    nights: int = 4
    traffic: int = 3  # instances per family a night (trained side, new seeds every night)
    held_out: int = 4  # per family (held-out side, the same every night)
    gate_instances: int = 2  # per family, the retraining job's own evaluation (held-out side)
    sft_steps: int = 60  # the sft stage's steps a night
    rl_steps: int = 4  # the rl stage's steps a night (each mini_batches updates)
    tasks_per_step: int = 4
    n: int = 4
    mini_batches: int = 2
    max_steps: int = 8  # per episode
    max_new_tokens: int = 112

    def key(self) -> str:
        return setting_key(self, FORMAT)


QUICK = Setting(
    families=("wifi_on", "open_app"),
    starter_instances=2,
    starter_steps=4,
    nights=1,
    traffic=1,
    held_out=1,
    gate_instances=1,
    sft_steps=2,
    rl_steps=1,
    tasks_per_step=1,
    n=2,
    mini_batches=1,
    max_steps=3,
)


def traffic_seeds(setting: Setting, family: str, seed: int, night: int) -> list[int]:
    """A night's instances of a family: trained side, seeds no other night or seed uses."""
    from devices.sim.tasks.splits import seeds

    return seeds(family, "trained", setting.traffic, start=200_000 + 10_000 * seed + 1_000 * night)


def held_out_seeds(setting: Setting, family: str) -> list[int]:
    from devices.sim.tasks.splits import seeds

    return seeds(family, "held_out", setting.held_out, start=1)


def retrain_config(
    setting: Setting, arm: str, seed: int, data: Path, store_url: str, starter: Path
) -> dict[str, Any]:
    """The arm's retraining job: ``deploy/retrain.yaml`` with ``SCALING`` and the setting's sizes."""
    import yaml

    product = yaml.safe_load((ROOT / "deploy" / "retrain.yaml").read_text(encoding="utf-8"))
    config = deep_merge(product, dotted({k: v for k, (v, _) in SCALING.items()}))
    if config["rl"].get("max_seconds") is None:
        config["rl"].pop("max_seconds", None)
    config["rl"] = deep_merge(
        config["rl"],
        {
            "seed": seed,
            "tasks_per_step": setting.tasks_per_step,
            "mini_batches": setting.mini_batches,
            "max_steps": setting.rl_steps,
            "save_every": setting.rl_steps,
            "rollout": {"n": setting.n, "max_new_tokens": setting.max_new_tokens},
            # Groups without spread are redrawn up to this many times a step (the product's 64 is
            # sized for a GPU's throughput; here a night's traffic has a handful of instances).
            "dynamic_sampling": {"max_extra_draws": 4 * setting.tasks_per_step},
        },
    )
    from serve.demo.loop.setting import sft_body

    config["sft"] = {"seed": seed, **sft_body(setting.lr, setting.sft_steps)}
    config["stages"] = STAGES[arm] or product["stages"]
    config["evaluation"]["online"] = {
        "tasks": list(setting.families),
        "seeds": [1000],
        "held_out": setting.gate_instances,
        "max_steps": setting.max_steps,
        "max_new_tokens": setting.max_new_tokens,
        "display": setting.display,
    }
    config["evaluation"].update({"max_new_tokens": setting.max_new_tokens, "device": "cpu"})
    config.update(
        {
            "kind": "retrain",
            "work_dir": str(data / "retrain"),
            "store": {"url": store_url, "screenshot_dir": str(data / "screenshots")},
            "base_model": str(starter),
            "base_served_name": "starter",
            "served_name": None,
            "version_prefix": arm.replace("+", "-"),
            "resize": resize(setting),
        }
    )
    return config


def local_policy(setting: Setting, base: str, adapter: str | None, name: str) -> tuple[Any, Any]:
    """An in-process policy on a version's weights as the service runs it, and its prompt."""
    from agent.checkpoint import checkpoint_system_prompt
    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalPolicy
    from agent.policy import SamplingSettings
    from agent.prompt import PromptSettings

    prompt = PromptSettings(
        resize=ResizeSettings(**resize(setting)), system_prompt=checkpoint_system_prompt(base, adapter)
    )
    sampling = SamplingSettings(max_tokens=setting.max_new_tokens)
    policy = LocalPolicy(
        base, adapter_dir=adapter, model_version=name, prompt=prompt, device="cpu", sampling=sampling
    )
    return policy, prompt


def evaluate(setting: Setting, weights: tuple[str, str | None], name: str) -> dict[str, Any]:
    """Greedy success of a version (checkpoint, adapter) on every held-out instance."""
    from train.online import OnlineSettings, online_success

    policy, prompt = local_policy(setting, *weights, name)
    online = OnlineSettings(
        tasks=list(setting.families),
        seeds=[1],
        held_out=setting.held_out,
        max_steps=setting.max_steps,
        max_new_tokens=setting.max_new_tokens,
        display=setting.display,
    )
    episodes = online_success(policy, online, prompt=prompt)["episodes"]
    per = {f"{e['task']}:{e['seed']}": bool(e["success"]) for e in episodes}
    return {"success": statistics.fmean(per.values()), "per_instance": per}


class Bench:
    def __init__(
        self, setting: Setting, cache: Path, *, progress: bool = True, starter: Path | None = None
    ) -> None:
        self.setting = setting
        self.given = starter.resolve() if starter else None
        key = setting.key() if starter is None else f"{setting.key()}-{_digest(str(self.given))}"
        self.home = cache / key
        self.progress = progress

    def starter(self) -> Path:
        """The starter checkpoint: the one given, else the demo's recipe on the trained side of
        every family."""
        from serve.demo.loop.setting import LoopSetting, ensure_starter

        if self.given is not None:
            return self.given
        s = self.setting
        loop = LoopSetting(
            known=s.families,
            new=(),
            starter_instances=s.starter_instances,
            starter_steps=s.starter_steps,
            lr=s.lr,
        )
        return ensure_starter(loop, self.home, quiet=not self.progress)

    def starter_score(self) -> dict[str, Any]:
        path = self.home / "starter-eval.json"
        if (done := read_json(path)) is None:
            done = evaluate(self.setting, (str(self.starter()), None), "starter")
            write_json(path, done)
        return done

    def night_path(self, arm: str, seed: int, night: int) -> Path:
        return self.home / f"{arm}-seed{seed}" / f"night-{night}.json"

    def nights(self, arm: str, seed: int) -> list[dict[str, Any]]:
        """The arm's cached nights for ``seed``, in order (stops at the first missing)."""
        out = []
        for night in range(1, self.setting.nights + 1):
            piece = read_json(self.night_path(arm, seed, night))
            if piece is None:
                break
            out.append(piece)
        return out

    def run_arm(self, arm: str, seed: int) -> list[dict[str, Any]]:
        """Every missing night of an arm and seed, one service for all of them."""
        done = self.nights(arm, seed)
        if arm == "off" or len(done) == self.setting.nights:
            return done
        with _Service(self, arm, seed) as service:
            for night in range(len(done) + 1, self.setting.nights + 1):
                started = time.monotonic()
                piece = service.night(night)
                piece["seconds"] = round(time.monotonic() - started, 1)
                write_json(self.night_path(arm, seed, night), piece)
                print(
                    f"{arm} seed {seed} night {night}: held-out {piece['held_out']['success']:.3f}, "
                    f"traffic {piece['traffic_success']:.2f}, promoted {piece['promoted']}, {piece['seconds']:.0f} s",
                    flush=True,
                )
                done.append(piece)
        return done


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class _Service:
    """The service, the phones and the person for one arm and seed; a night at a time."""

    def __init__(self, bench: Bench, arm: str, seed: int) -> None:
        self.bench, self.arm, self.seed = bench, arm, seed
        self.data = bench.home / f"{arm}-seed{seed}" / "service"

    def __enter__(self) -> _Service:
        with ExitStack() as stack:  # a start that fails half-way stops what it had started
            self._start(stack)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self, stack: ExitStack) -> None:
        from agent.episode import EpisodeSettings
        from agent.local_policy import LocalModels
        from agent.policy import SamplingSettings
        from agent.registry import ModelRegistry
        from agent.settings import StoreSettings
        from agent.store import TrajectoryStore
        from devices.adb_server import AdbServer
        from devices.ports import free_port
        from devices.sim.display import profile
        from devices.sim.fleet import SimFleet
        from serve.api.client import AgentClient
        from serve.demo.tour import start_service, stop_service
        from serve.models.swap import SwapSettings
        from serve.ops.scheduler import SchedulerSettings
        from serve.settings import ServeSettings

        s = self.bench.setting
        starter = self.bench.starter()
        self.data.mkdir(parents=True, exist_ok=True)
        store = StoreSettings(
            url=f"sqlite:///{self.data / 'trajectories.db'}", screenshot_dir=self.data / "screenshots"
        )
        config_path = self.data / "retrain.json"
        config = retrain_config(s, self.arm, self.seed, self.data, store.url, starter)
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        # The version to serve: the starter on a first night, else what the last night promoted.
        trajectories = TrajectoryStore(store.url, store.screenshot_dir)
        trajectories.migrate()
        serving = ModelRegistry(trajectories.engine).promoted()
        trajectories.engine.dispose()
        base, adapter, name = (
            (serving.base or str(starter), serving.adapter, serving.served_name)
            if serving
            else (str(starter), None, "starter")
        )
        policy, prompt = local_policy(s, base, adapter, name)
        adb = stack.enter_context(AdbServer(port=free_port()))
        fleet = stack.enter_context(SimFleet(adb))
        self.phones = [fleet.add(display=profile(s.display)) for _ in s.families]
        settings = ServeSettings(
            store=store,
            adb_servers=[f"127.0.0.1:{adb.port}"],
            port=free_port(),
            resize=prompt.resize,
            episode=EpisodeSettings(
                max_steps=s.max_steps,
                max_parse_errors=1,
                settle_s=0.05,
                sampling=SamplingSettings(max_tokens=s.max_new_tokens),
            ),
            scheduler=SchedulerSettings(retrain_config=config_path, job_timeout_s=3600),
            swap=SwapSettings(retire_after_s=5, canary_max_tokens=s.max_new_tokens),
        )
        server, thread, token = start_service(settings, LocalModels(policy))
        stack.callback(stop_service, server, thread)
        self.client = stack.enter_context(
            AgentClient(f"http://127.0.0.1:{settings.port}", token, timeout=120)
        )
        if serving is None:
            self.client.register_model("starter", served_name="starter", base=str(starter), kind="base")
            self.client.promote("starter", reason="the first night's version")

    def night(self, night: int) -> dict[str, Any]:
        """Traffic, corrections, the retraining job, the gate and the swap, then the held-out score."""
        from rich.console import Console

        from devices.sim.tasks import TASKS
        from serve.demo.loop.person import correct_and_label, run_checked
        from serve.demo.loop.watch import follow_job, gate_decision

        s, client = self.bench.setting, self.client
        instances = [(f, seed) for f in s.families for seed in traffic_seeds(s, f, self.seed, night)]
        tasks = [TASKS[family].create(seed) for family, seed in instances]
        checked = run_checked(client, tasks, self.phones, label=True)
        failed = [instance for instance, (_, ok) in zip(instances, checked, strict=True) if not ok]
        corrected = 0
        for family, seed in failed:
            _, steps, _ = correct_and_label(
                client, TASKS[family].create(seed), self.phones[0], lambda *a: None
            )
            corrected += steps
        job = client.start_job()
        ended = follow_job(client, job["id"], s.sft_steps, Console(quiet=not self.bench.progress))
        candidate = (ended.get("detail") or {}).get("candidate")
        state = (gate_decision(client, candidate, 900) or "undecided") if candidate else None
        info = client.model(candidate)["info"] if candidate else {}
        serving = _serving(client)
        held = evaluate(s, (serving["base"], serving.get("adapter")), serving["name"])
        return {
            "night": night,
            "traffic": len(instances),
            "traffic_success": 1 - len(failed) / len(instances),
            "corrected_steps": corrected,
            "job": {"status": ended["status"], "reason": ended.get("reason")},
            "candidate": candidate,
            "stages": info.get("stages"),
            "state": state,
            "gate": info.get("gate"),
            "promoted": serving["name"],
            "held_out": held,
        }


def _serving(client: Any) -> dict[str, Any]:
    return client.model(client.models()["default"])  # type: ignore[no-any-return]


# -- the table ------------------------------------------------------------------------------------
def detectable(starter: dict[str, bool], seeds: int) -> float:
    """The smallest gain over the control a 95% interval tells from 0 at 80% power, if a gain moved
    each instance's success independently: sd of a paired 0/1 difference, at most sqrt(p(1-p)*2)
    for a starter at p, over instances x seeds."""
    if not starter:
        return float("nan")
    p = statistics.fmean(starter.values())
    variance = max(2 * p * (1 - p), 0.25)  # a starter at 0 or 1 still leaves the arm's own spread
    return (1.96 + 0.84) * math.sqrt(variance / (len(starter) * seeds))


def summarise(bench: Bench, arms: list[str], seeds: list[int]) -> dict[str, Any]:
    s = bench.setting
    starters = {seed: bench.starter_score()["per_instance"] for seed in seeds}
    out: dict[str, Any] = {
        "setting": asdict(s),
        "scaling": {k: {"value": v, "why": why} for k, (v, why) in SCALING.items()},
        "varies": _varies(s),
        "detectable": detectable(next(iter(starters.values()), {}), len(seeds)),
        "arms": {},
    }
    for arm in arms:
        runs = {seed: ([] if arm == "off" else bench.nights(arm, seed)) for seed in seeds}
        row: dict[str, Any] = {"nights": [], "complete_seeds": []}
        for night in range(s.nights + 1):
            per: dict[int, dict[str, float]] = {}
            for seed in seeds:
                if night == 0 or arm == "off":
                    per[seed] = {i: float(v) for i, v in starters[seed].items()}
                elif len(runs[seed]) >= night:
                    per[seed] = {
                        i: float(v) for i, v in runs[seed][night - 1]["held_out"]["per_instance"].items()
                    }
            if not per:
                break
            control = {
                i: statistics.fmean(float(starters[x][i]) for x in per) for i in next(iter(per.values()))
            }
            success = statistics.fmean(v for p in per.values() for v in p.values())
            zero = dict.fromkeys(control, 0.0)
            _, low, high = bootstrap_gain(per, zero)
            gain = bootstrap_gain(per, control)
            row["nights"].append(
                {
                    "night": night,
                    "seeds": sorted(per),
                    "success": success,
                    "interval": [low, high],
                    "gain": list(gain),
                }
            )
        row["complete_seeds"] = [x for x in seeds if arm == "off" or len(runs[x]) == s.nights]
        row["seconds_per_night"] = (
            statistics.fmean(n["seconds"] for r in runs.values() for n in r) if any(runs.values()) else None
        )
        row["promoted_nights"] = sum(1 for r in runs.values() for n in r if n.get("state") == "promoted")
        row["retrained_nights"] = sum(len(r) for r in runs.values())
        row["trained_on"] = (
            "nothing (retraining off)" if arm == "off" else f"stages {STAGES[arm] or _product_stages()}"
        )
        out["arms"][arm] = row
    nightly = out["arms"].get("nightly", {}).get("nights", [])
    last = nightly[-1] if nightly and nightly[-1]["night"] == s.nights else None
    out["verdict"] = (
        "not run to the last night yet"
        if last is None
        else "refuted: the nightly job is not shown to make the agent better"
        if last["gain"][1] <= 0
        else "not refuted: the nightly job made the agent better than retraining off"
    )
    return out


def _product_stages() -> list[str]:
    import yaml

    return list(yaml.safe_load((ROOT / "deploy" / "retrain.yaml").read_text(encoding="utf-8"))["stages"])


def _varies(s: Setting) -> dict[str, str]:
    from devices.sim.tasks.splits import VARIES

    return {f: VARIES[f] for f in s.families}


def render(summary: dict[str, Any]) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Held-out success by night (greedy; 95% interval over instances and seeds)")
    table.add_column("arm")
    nights = max((len(r["nights"]) for r in summary["arms"].values()), default=0)
    for night in range(nights):
        table.add_column(f"night {night}", justify="right")
    table.add_column("last night - off [95%]", justify="right")
    table.add_column("s/night", justify="right")
    for arm, row in summary["arms"].items():
        cells = [
            f"{n['success']:.3f} [{n['interval'][0]:.2f}, {n['interval'][1]:.2f}]" for n in row["nights"]
        ]
        gain = row["nights"][-1]["gain"] if row["nights"] else [float("nan")] * 3
        spent = f"{row['seconds_per_night']:.0f}" if row["seconds_per_night"] else "-"
        table.add_row(
            arm,
            *cells,
            *([""] * (nights - len(cells))),
            f"{gain[0]:+.3f} [{gain[1]:+.2f}, {gain[2]:+.2f}]",
            spent,
        )
    console = Console(width=160)
    with console.capture() as captured:
        console.print(table)
    lines = [captured.get()]
    lines.append(f"smallest gain the interval can detect (80% power): {summary['detectable']:.3f}")
    lines.append(f"verdict: {summary['verdict']}")
    return "\n".join(lines)


def picture(summary: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, row in summary["arms"].items():
        x = [n["night"] for n in row["nights"]]
        y = [n["success"] for n in row["nights"]]
        low = [n["interval"][0] for n in row["nights"]]
        high = [n["interval"][1] for n in row["nights"]]
        colour: Any = "black" if arm == "off" else None
        (line,) = ax.plot(x, y, marker="o", label=arm, color=colour, linestyle="--" if arm == "off" else "-")
        ax.fill_between(x, low, high, alpha=0.15, color=line.get_color())
    ax.set_xlabel("night")
    ax.set_ylabel("held-out success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("The product's loop, night by night, on held-out instances", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", nargs="?", default="all", choices=("all", "run", "table"))
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=["nightly", "sft", "off"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--nights", type=int, help="nights per arm and seed (default 4)")
    parser.add_argument(
        "--starter-instances", type=int, help="the starter's instances per family (default 24)"
    )
    parser.add_argument("--starter-steps", type=int, help="the starter's SFT steps (default 600)")
    parser.add_argument("--families", nargs="+", help="task families (default: the five of Setting)")
    parser.add_argument("--quick", action="store_true", help="a minute-scale setting of every piece (CI)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument(
        "--starter", type=Path, help="start every arm from this checkpoint instead of building the starter"
    )
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "nights")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--figure", type=Path, help="also draw the picture here (PNG)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan, the power and the rule; run nothing"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()

    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    setting = QUICK if args.quick else Setting()
    for field in ("nights", "starter_instances", "starter_steps"):
        if getattr(args, field):
            setting = replace(setting, **{field: getattr(args, field)})
    if args.families:
        setting = replace(setting, families=tuple(args.families))
    if args.quick:
        args.seeds = args.seeds[:1]
    bench = Bench(setting, args.cache, progress=not args.quiet, starter=args.starter)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in facts(with_torch=True).items()), flush=True)
    print(f"cache: {bench.home}", flush=True)
    print(
        "refutation rule (stated before the run): the nightly job is not shown to make the agent better "
        "if, by the last night, the 95% interval of (nightly - off) in held-out success includes 0 or lies below it",
        flush=True,
    )
    if args.dry_run:
        held = sum(len(held_out_seeds(setting, f)) for f in setting.families)
        print(
            f"plan: arms {', '.join(args.arms)} x seeds {args.seeds} x {setting.nights} nights; "
            f"{len(setting.families) * setting.traffic} traffic episodes a night; {held} held-out instances"
        )
        return 0
    if args.command in ("all", "run"):
        starter = bench.starter_score()
        print(
            f"starter: held-out success {starter['success']:.3f} on {len(starter['per_instance'])} instances; "
            f"smallest gain detectable (80% power, {len(args.seeds)} seeds): "
            f"{detectable(starter['per_instance'], len(args.seeds)):.3f}",
            flush=True,
        )
        for seed in args.seeds:
            for arm in args.arms:
                bench.run_arm(arm, seed)
    summary = summarise(bench, args.arms, args.seeds)
    summary["machine"] = facts(with_torch=True)
    print(render(summary), flush=True)
    if args.json:
        write_json(args.json, summary)
    if args.figure:
        print(f"figure: {picture(summary, args.figure)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
