"""``uis1 demo``: the product's loop on one machine, from a policy that fails to one that does not.

1. **Before**: a starter policy (a small model trained here on some simulated tasks) gets five
   tasks on simulated phones; each is checked on the phone and labelled.
2. **A person corrects**: each failed task runs again, held before every action. A stand-in for a
   person, who knows how each task is done (the simulated task's own solver), makes the calls the
   viewer's buttons make: it lets the model's action go while it is the right one, and from the
   first wrong one on supplies the action itself; then it labels the outcome.
3. **Retraining**: ``POST /v1/jobs`` runs the retraining job on the logged traffic (curate, train,
   evaluate, register a candidate), in a child process as the nightly job runs.
4. **Gate and hot swap**: the service gates the candidate against the serving version and swaps it
   into the running policy while requests keep coming (none may fail).
5. **After**: the same tasks again, and held-out instances of them (other seeds: other list orders
   and positions), with a before/after table.

Everything goes through the real API, the real adb server and the real training code; only the
phones and the person are simulated, and the demo says so.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
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


@dataclass
class Row:
    family: str
    seed: int
    corrected: bool = False
    before: bool | None = None
    after: bool | None = None
    links: list[str] = field(default_factory=list)


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
    from agent.tiny_model import ensure_tiny_model

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
        try:
            os.rename(checkpoints[-1], target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent builder's finished copy
                raise
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


def agrees(proposed: dict[str, Any] | None, expert: Any) -> bool:
    """Whether the model's proposed action is the one the person would take: the same kind of action,
    on the same element (inside the expert target's bounds), with the same text, app or key."""
    if proposed is None or proposed.get("action") != expert.action:
        return False
    if expert.bbox is not None and "coordinate" in proposed:
        x, y = proposed["coordinate"]
        left, top, right, bottom = expert.bbox
        return bool(left <= x <= right and top <= y <= bottom)
    wanted = {k: v for k, v in expert.to_dict().items() if k != "coordinate"}
    return all(proposed.get(k) == v for k, v in wanted.items())


def _brief(action: dict[str, Any] | None) -> str:
    if action is None:
        return "an answer that does not parse"
    detail = {k: v for k, v in action.items() if k != "action"}
    return f"{action['action']} {json.dumps(detail, separators=(',', ':'))}" if detail else action["action"]


def _screenshot_b64() -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (1080, 2400), "white").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


class RequestStream:
    """Single-step requests sent one after another while the swap happens, counting failures."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token
        self.versions: dict[str, int] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-requests", daemon=True)

    def __enter__(self) -> RequestStream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    @property
    def sent(self) -> int:
        return sum(self.versions.values()) + len(self.failed)

    def _run(self) -> None:
        import httpx

        body = {"goal": "Turn on Wi-Fi", "screenshots": [_screenshot_b64()], "sampling": {"max_tokens": 16}}
        with httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        ) as http:
            while not self._stop.is_set():
                try:
                    reply = http.post("/v1/predict", json=body)
                except httpx.HTTPError as exc:
                    self.failed.append(type(exc).__name__)
                    continue
                if reply.status_code == 200:
                    version = str(reply.json().get("model_version"))
                    self.versions[version] = self.versions.get(version, 0) + 1
                else:
                    self.failed.append(f"{reply.status_code}: {reply.text[:200]}")
                self._stop.wait(0.2)


def _finished(client: Any, task_id: str, timeout: float = 300) -> Any:
    """The task once it has ended (None when it did not within ``timeout``)."""

    def ended() -> Any:
        task = client.task(task_id)
        return task if task.status.finished else None

    return _poll(ended, timeout)


def _held_at(client: Any, task_id: str, index: int, timeout: float = 120) -> Any:
    """The task once step ``index`` is held for the person, or once it has ended."""

    def ready() -> Any:
        task = client.task(task_id)
        return task if task.status.finished or (task.held is not None and task.held.index == index) else None

    return _poll(ready, timeout)


def _poll(until: Any, timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := until()) is not None:
            return value
        time.sleep(every)
    return None


@dataclass
class LoopResult:
    rows: list[Row]
    starter: str
    promoted: str | None
    corrected_steps: int
    requests_during_swap: int
    failed_requests: list[str]
    gate: dict[str, Any]
    data: Path
    timings: dict[str, float]

    def success(
        self, when: str, *, corrected: bool | None = None, held_out: bool = False, seed: int = 0
    ) -> int:
        return sum(
            bool(getattr(r, when))
            for r in self.rows
            if (r.seed != seed) == held_out and (corrected is None or r.corrected == corrected)
        )


def run_loop(
    setting: LoopSetting | None = None,
    *,
    data_dir: Path | None = None,
    keep_running: bool = False,
    port: int | None = None,
    cache: Path | None = None,
    quiet: bool = False,
    as_json: bool = False,
) -> LoopResult:
    """Run the loop demo; returns its result (the CLI prints it as a table or JSON)."""
    from rich.console import Console

    from agent.checkpoint import checkpoint_system_prompt
    from agent.episode import EpisodeSettings
    from agent.local_policy import LocalModels, LocalPolicy
    from agent.policy import SamplingSettings
    from agent.prompt import PromptSettings
    from agent.settings import StoreSettings
    from devices.adb_server import AdbServer
    from devices.ports import free_port
    from devices.sim.display import LEARNABLE
    from devices.sim.fleet import SimFleet
    from devices.sim.tasks import TASKS, ExpertAction, Outcome
    from serve.client import AgentClient
    from serve.demo import start_service, stop_service
    from serve.scheduler import SchedulerSettings
    from serve.settings import ServeSettings
    from serve.swap import SwapSettings

    s = setting or LoopSetting()
    console = Console(stderr=as_json, quiet=quiet)
    say = console.print
    timings: dict[str, float] = {}
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    data = data_dir or Path(tempfile.mkdtemp(prefix="uis1-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    say(
        f"[bold]The loop:[/] a small model does phone tasks, people correct it where it fails, the retraining "
        f"job learns from that traffic, and the new version is gated and swapped in while the service runs.\n"
        f"data: {data}"
    )
    say(
        f"\n[bold]Starter policy[/]: a tiny Qwen2.5-VL (0.8 M parameters) trained here on {', '.join(s.known)} "
        f"({len(s.starter_seeds)} instances each, {s.starter_steps} SFT steps); it has never seen "
        f"{', '.join(s.new)}."
    )
    starter = ensure_starter(s, cache or cache_dir(), quiet=quiet or as_json)
    say(f"starter: {starter}")
    lap("starter")

    tasks = [(f, s.seed) for f in s.families]
    held_out = [(f, seed) for seed in s.held_out_seeds for f in s.families]
    adb_port = free_port()
    with AdbServer(port=adb_port) as adb, SimFleet(adb) as fleet:
        phones = [fleet.add(display=LEARNABLE) for _ in tasks]
        store = StoreSettings(
            url=f"sqlite:///{data / 'trajectories.db'}", screenshot_dir=data / "screenshots"
        )
        config_path = data / "retrain.json"
        config_path.write_text(
            json.dumps(retrain_config(s, data, store.url, starter), indent=2), encoding="utf-8"
        )
        settings = ServeSettings(
            store=store,
            adb_servers=[f"127.0.0.1:{adb_port}"],
            port=port or free_port(),
            resize=IMAGE,
            episode=EpisodeSettings(
                max_steps=s.max_steps,
                max_parse_errors=1,
                settle_s=0.1,
                sampling=SamplingSettings(max_tokens=MAX_TOKENS),
            ),
            scheduler=SchedulerSettings(retrain_config=config_path, job_timeout_s=1800),
            swap=SwapSettings(retire_after_s=5, canary_max_tokens=MAX_TOKENS),
        )
        prompt = PromptSettings(resize=IMAGE, system_prompt=checkpoint_system_prompt(starter))
        engine = LocalModels(
            LocalPolicy(
                starter,
                model_version="starter",
                prompt=prompt,
                device="cpu",
                sampling=SamplingSettings(max_tokens=MAX_TOKENS),
            )
        )
        server, thread, token = start_service(settings, engine)
        base = f"http://127.0.0.1:{settings.port}"
        client = AgentClient(base, token, timeout=120)
        say(f"service: {base}  (admin key: {token})")
        say(
            f"phones: {len(phones)} simulated phones (1080x2400, large-text display) behind the adb server "
            f"on port {adb_port}"
        )
        client.register_model("starter", served_name="starter", base=str(starter), kind="base")
        client.promote("starter", reason="the demo's first version")
        rows = {(f, seed): Row(f, seed) for f, seed in [*tasks, *held_out]}

        def viewer(task_id: str) -> str:
            return f"{base}/viewer/tasks/{task_id}#key={token}"

        def run_tasks(instances: list[tuple[str, int]], when: str, *, label: bool = True) -> None:
            """Each instance on its own phone, all at once; each checked on the phone and, with
            ``label``, labelled by the checker (labelled traffic is what retraining learns from)."""
            submitted = []
            for (family, seed), device in zip(instances, phones, strict=False):
                task = TASKS[family].create(seed)
                task.initialize(device.phone)
                created = client.create_task(task.goal, device={"serial": device.serial})
                submitted.append((created.id, family, seed, task, device))
            for task_id, family, seed, task, device in submitted:
                result = _finished(client, task_id)
                ok = result is not None and task.is_successful(device.phone, Outcome(answer=result.answer))
                if label:
                    client.feedback(task_id, "success" if ok else "failure", source="checker")
                row = rows[(family, seed)]
                setattr(row, when, ok)
                row.links.append(viewer(task_id))
                actions = [
                    _brief(st.device_action) if st.device_action else "unparseable"
                    for st in client.trajectory(task_id).steps
                ]
                mark = "[green]done[/]" if ok else "[red]not done[/]"
                name = task.goal if seed == s.seed else f"{task.goal} (seed {seed})"
                say(f"  {name:<40} {mark:<20} {' > '.join(actions)}")

        def batches(instances: list[tuple[str, int]]) -> Iterator[list[tuple[str, int]]]:
            for i in range(0, len(instances), len(phones)):
                yield instances[i : i + len(phones)]

        say(f"\n[bold]1. Before[/]: {len(tasks)} tasks with the starter, each checked on the phone")
        for batch in batches(tasks):
            run_tasks(batch, "before")
        say("  and held-out instances (other list orders and positions; not labelled, so never learnt from)")
        for batch in batches(held_out):
            run_tasks(batch, "before", label=False)
        lap("before")

        failed = [(f, seed) for f, seed in tasks if not rows[(f, seed)].before]
        say(
            f"\n[bold]2. A person corrects[/] the {len(failed)} failed task(s). The person here is a script "
            "that knows how each simulated task is done (its solver); it makes the same calls as the "
            "viewer's buttons: the task starts held, the model's action goes on while it is right, and "
            "from the first wrong one the person supplies each action (a takeover)."
        )
        corrected_steps = 0
        for (family, seed), device in zip(failed, phones, strict=False):
            task = TASKS[family].create(seed)
            task.initialize(device.phone)
            created = client.create_task(task.goal, device={"serial": device.serial}, paused=True)
            solver = task.solve(device.phone)
            taking_over = False
            say(f"  {task.goal}")
            while True:
                index = len(client.trajectory(created.id).steps)
                held = _held_at(client, created.id, index)
                if held is None or held.status.finished:
                    break
                expert = next(solver, ExpertAction("terminate", status="success"))
                proposed = held.held.proposed_action if held.held else None
                last = expert.action in ("terminate", "answer")
                if not taking_over and agrees(proposed, expert):
                    client.resume(created.id, hold=True)
                    say(f"    step {index + 1}: the model's {_brief(proposed)}: right, it goes on")
                    continue
                taking_over = True
                corrected_steps += 1
                client.take_over(created.id, expert.to_dict(), hold=not last)
                say(
                    f"    step {index + 1}: the model wanted {_brief(proposed)}; the person does "
                    f"{_brief(expert.to_dict())}"
                )
            result = _finished(client, created.id)
            ok = result is not None and task.is_successful(device.phone, Outcome(answer=result.answer))
            client.feedback(created.id, "success" if ok else "failure", comment="corrected by a person")
            rows[(family, seed)].corrected = True
            rows[(family, seed)].links.append(viewer(created.id))
            say(f"    -> {'done' if ok else 'not done'}, labelled by the person")
        lap("corrections")

        say(
            "\n[bold]3. Retraining[/] (POST /v1/jobs): curate the labelled traffic, train from the serving "
            "version, evaluate both versions on other instances of these tasks, register a candidate"
        )
        with RequestStream(base, token) as stream:
            job = client.start_job()
            finished = _follow_job(client, job["id"], s.retrain_steps, console)
            lap("retraining")
            candidate = (finished.get("detail") or {}).get("candidate")
            if finished["status"] != "succeeded" or not candidate:
                say(f"[red]the retraining job ended {finished['status']}: {finished.get('reason')}[/]")
            say(
                "\n[bold]4. Gate and hot swap[/]: the service compares the candidate with the serving version "
                "and, when it is not worse, swaps it into the running policy while requests keep coming"
            )
            state = _poll(lambda: _state_of(client, candidate) if candidate else "none", 600, every=0.5)
            time.sleep(1.0)  # a few requests after the flip too
        info = client.model(candidate)["info"] if candidate else {}
        gate = info.get("gate") or {}
        for reason in gate.get("reasons", []):
            say(f"  gate: {reason}")
        promoted = candidate if state == "promoted" else None
        say(
            f"  candidate {candidate}: {state}; {stream.sent} requests answered meanwhile "
            f"({', '.join(f'{n} by {v}' for v, n in stream.versions.items())}), {len(stream.failed)} failed"
        )
        lap("swap")

        say(
            f"\n[bold]5. After[/]: the same tasks with {promoted or 'the starter'}, and held-out instances "
            "(other list orders and positions) that no training saw"
        )
        for batch in batches([*tasks, *held_out]):
            run_tasks(batch, "after")
        lap("after")

        result = LoopResult(
            list(rows.values()),
            "starter",
            promoted,
            corrected_steps,
            stream.sent,
            stream.failed,
            gate,
            data,
            timings,
        )
        if as_json:
            typer.echo(json.dumps(_as_json(result), indent=2))
        else:
            say(render(result))
            say(
                f"\nTrajectories, screenshots and models are in {data}. "
                + (
                    "The service keeps running for the viewer links; Ctrl-C stops it."
                    if keep_running
                    else "The viewer links need the service: run with --keep-running."
                )
            )
        stop_service(server, thread, keep_running=keep_running)
    return result


def _state_of(client: Any, name: str) -> str | None:
    """The candidate's state once the gate decided (promoted or rejected), else None."""
    versions = client.models()["versions"]
    state = next((v["state"] for v in versions if v["name"] == name), None)
    return state if state in ("promoted", "rejected") else None


def _follow_job(client: Any, job_id: str, steps: int, console: Any) -> dict[str, Any]:
    """A progress bar for the job: its stage, and the training steps its run has written."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task("retraining: starting", total=steps)
        while True:
            job = client.job(job_id)
            detail = job.get("detail") or {}
            stage = detail.get("stage") or job["status"]
            metrics = Path(detail["job_dir"]) / "sft" / "metrics.jsonl" if detail.get("job_dir") else None
            done = sum(1 for _ in metrics.open(encoding="utf-8")) if metrics and metrics.is_file() else 0
            progress.update(bar, completed=min(done, steps), description=f"retraining: {stage}")
            if job["status"] in ("succeeded", "failed", "skipped"):
                if job["status"] == "succeeded":
                    progress.update(bar, completed=steps)
                return job  # type: ignore[no-any-return]
            time.sleep(0.5)


def render(result: LoopResult) -> Any:
    """The before/after table, and what it shows (a rich renderable)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    after = result.promoted or result.starter
    table = Table(title="Before and after retraining on the corrected traffic")
    for column in ("task", "instance", "corrected", result.starter, f"after: {after}"):
        table.add_column(column, overflow="fold")
    for row in sorted(result.rows, key=lambda r: (r.seed != 0, not r.corrected, r.family)):
        table.add_row(
            row.family,
            "demo" if row.seed == 0 else f"held-out (seed {row.seed})",
            "yes" if row.corrected else "",
            _cell(row.before),
            _cell(row.after),
        )
    lines: list[str] = []
    corrected = [r for r in result.rows if r.corrected]
    lines.append(
        f"Corrected tasks: {sum(bool(r.before) for r in corrected)}/{len(corrected)} done before, "
        f"{sum(bool(r.after) for r in corrected)}/{len(corrected)} after; people corrected "
        f"{result.corrected_steps} step(s). Held-out instances: "
        f"{result.success('before', held_out=True)}/{len([r for r in result.rows if r.seed])} before, "
        f"{result.success('after', held_out=True)}/{len([r for r in result.rows if r.seed])} after."
    )
    lines.append(
        f"Versions: {result.starter} -> {result.promoted or '(the candidate was not promoted)'}; "
        f"{result.requests_during_swap} requests during the retraining and swap, {len(result.failed_requests)} failed."
    )
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result.timings.items())
    lines.append(f"Time: {spent}.")
    lines.append(
        "What it learnt is shown on the corrected tasks; the held-out rows (instances no training "
        "saw) say whether it generalised. One correction per task is very little data: a held-out "
        "row that stays 'no' is the honest answer for a 0.8 M-parameter model."
    )
    for row in result.rows:
        for link in row.links[-1:]:
            lines.append(f"  {row.family} ({'demo' if row.seed == 0 else f'seed {row.seed}'}): {link}")
    return Group(table, Text("\n".join(lines)))


def _cell(value: bool | None) -> str:
    return "-" if value is None else ("done" if value else "no")


def _as_json(result: LoopResult) -> dict[str, Any]:
    out = asdict(result)
    out["data"] = str(result.data)
    return out
