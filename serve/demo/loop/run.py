"""The loop demo's five acts over the real API: before, a person corrects, retraining, gate and hot
swap, after (see the package's docstring)."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from serve.demo.loop.person import brief, correct_and_label, run_checked
from serve.demo.loop.report import LoopResult, Row, render, result_json
from serve.demo.loop.setting import (
    IMAGE,
    MAX_TOKENS,
    LoopSetting,
    cache_dir,
    ensure_starter,
    retrain_config,
    retraining_summary,
)
from serve.demo.loop.watch import RequestStream, follow_job, gate_decision


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

    from devices.adb_server import AdbServer
    from devices.ports import free_port
    from devices.sim.fleet import SimFleet
    from serve.demo.tour import stop_service

    s = setting or LoopSetting()
    console = Console(stderr=as_json, quiet=quiet)
    say = console.print
    data = data_dir or Path(tempfile.mkdtemp(prefix="uis1-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    say(
        f"[bold]The loop:[/] a small model does phone tasks, people correct it where it fails, the retraining "
        f"job learns from that traffic, and the new version is gated and swapped in while the service runs.\n"
        f"data: {data}"
    )
    say(
        f"\n[bold]Starter policy[/]: a tiny Qwen2.5-VL (0.8 M parameters) trained here on {', '.join(s.known)} "
        f"({s.starter_instances} instances each, {s.starter_steps} SFT steps); it has never seen "
        f"{', '.join(s.new)}."
    )
    clock = _Laps()
    starter = ensure_starter(s, cache or cache_dir(), quiet=quiet or as_json)
    say(f"starter: {starter}")
    clock.lap("starter")
    adb_port = free_port()
    with AdbServer(port=adb_port) as adb, SimFleet(adb) as fleet:
        loop = _Loop(s, console, say, clock, data, starter, fleet, adb_port, port or free_port())
        result = loop.run()
        if as_json:
            typer.echo(json.dumps(result_json(result), indent=2))
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
        stop_service(loop.server, loop.thread, keep_running=keep_running)
    return result


class _Laps:
    """Seconds spent in each act."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._clock = time.monotonic()

    def lap(self, name: str) -> None:
        self.timings[name] = round(time.monotonic() - self._clock, 1)
        self._clock = time.monotonic()


class _Loop:
    """The service on simulated phones with the starter serving, and the acts run against it."""

    def __init__(
        self,
        s: LoopSetting,
        console: Any,
        say: Callable[..., None],
        clock: _Laps,
        data: Path,
        starter: Path,
        fleet: Any,
        adb_port: int,
        port: int,
    ) -> None:
        from devices.sim.display import LEARNABLE

        self.s, self.console, self.say, self.clock, self.data = s, console, say, clock, data
        self.tasks = [(f, s.demo_seed(f)) for f in s.families]
        self.held_out = [(f, seed) for f in s.families for seed in s.held_out_seeds(f)]
        self.phones = [fleet.add(display=LEARNABLE) for _ in self.tasks]
        self.rows = {(f, seed): Row(f, seed) for f, seed in self.tasks}
        self.rows.update({(f, seed): Row(f, seed, held_out=True) for f, seed in self.held_out})
        self.starter = starter
        self._start_service(adb_port, port)

    def _start_service(self, adb_port: int, port: int) -> None:
        from agent.checkpoint import checkpoint_system_prompt
        from agent.episode import EpisodeSettings
        from agent.local_policy import LocalModels, LocalPolicy
        from agent.policy import SamplingSettings
        from agent.prompt import PromptSettings
        from agent.settings import StoreSettings
        from serve.api.client import AgentClient
        from serve.demo.tour import start_service
        from serve.models.swap import SwapSettings
        from serve.ops.scheduler import SchedulerSettings
        from serve.settings import ServeSettings

        data, s = self.data, self.s
        store = StoreSettings(
            url=f"sqlite:///{data / 'trajectories.db'}", screenshot_dir=data / "screenshots"
        )
        config_path = data / "retrain.json"
        config = retrain_config(s, data, store.url, self.starter)
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        settings = ServeSettings(
            store=store,
            adb_servers=[f"127.0.0.1:{adb_port}"],
            port=port,
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
        prompt = PromptSettings(resize=IMAGE, system_prompt=checkpoint_system_prompt(self.starter))
        sampling = SamplingSettings(max_tokens=MAX_TOKENS)
        policy = LocalPolicy(
            self.starter, model_version="starter", prompt=prompt, device="cpu", sampling=sampling
        )
        self.server, self.thread, self.token = start_service(settings, LocalModels(policy))
        self.base = f"http://127.0.0.1:{settings.port}"
        self.client = AgentClient(self.base, self.token, timeout=120)
        self.say(f"service: {self.base}  (admin key: {self.token})")
        self.say(
            f"phones: {len(self.phones)} simulated phones (1080x2400, large-text display) behind the adb server "
            f"on port {adb_port}"
        )
        self.client.register_model("starter", served_name="starter", base=str(self.starter), kind="base")
        self.client.promote("starter", reason="the demo's first version")

    def run(self) -> LoopResult:
        from devices.sim.tasks.splits import VARIES

        say, clock = self.say, self.clock
        say(f"\n[bold]1. Before[/]: {len(self.tasks)} tasks with the starter, each checked on the phone")
        self._run_all(self.tasks, "before")
        say(
            "  and held-out instances (the rows to tap elsewhere, or another app named; not labelled, so "
            "never learnt from)"
        )
        self._run_all(self.held_out, "before", label=False)
        clock.lap("before")
        corrected_steps = self._corrections()
        clock.lap("corrections")
        promoted, gate, stream = self._retrain_and_swap()
        say(
            f"\n[bold]5. After[/]: the same tasks with {promoted or 'the starter'}, and the held-out instances, "
            "which no training saw"
        )
        self._run_all([*self.tasks, *self.held_out], "after")
        clock.lap("after")
        return LoopResult(
            list(self.rows.values()),
            "starter",
            promoted,
            corrected_steps,
            stream.sent,
            stream.failed,
            gate,
            self.data,
            clock.timings,
            dict(stream.versions),
            {f: VARIES[f] for f in self.s.families},
            retraining_summary(self.s),
        )

    def viewer(self, task_id: str) -> str:
        return f"{self.base}/viewer/tasks/{task_id}#key={self.token}"

    def _run_all(self, instances: list[tuple[str, int]], when: str, *, label: bool = True) -> None:
        """Each instance on its own phone, as many at once as there are phones; each checked on the
        phone and, with ``label``, labelled by the checker."""
        from devices.sim.tasks import TASKS

        tasks = [TASKS[family].create(seed) for family, seed in instances]
        checked = run_checked(self.client, tasks, self.phones, label=label)
        for (family, seed), task, (task_id, ok) in zip(instances, tasks, checked, strict=True):
            row = self.rows[(family, seed)]
            setattr(row, when, ok)
            row.links.append(self.viewer(task_id))
            actions = [
                brief(st.device_action) if st.device_action else "unparseable"
                for st in self.client.trajectory(task_id).steps
            ]
            mark = "[green]done[/]" if ok else "[red]not done[/]"
            name = f"{task.goal} (held-out seed {seed})" if row.held_out else task.goal
            self.say(f"  {name:<40} {mark:<20} {' > '.join(actions)}")

    def _corrections(self) -> int:
        """The person corrects every failed task; returns the steps corrected."""
        from devices.sim.tasks import TASKS

        failed = [(f, seed) for f, seed in self.tasks if not self.rows[(f, seed)].before]
        self.say(
            f"\n[bold]2. A person corrects[/] the {len(failed)} failed task(s). The person here is a script "
            "that knows how each simulated task is done (its solver); it makes the same calls as the "
            "viewer's buttons: the task starts held, the model's action goes on while it is right, and "
            "from the first wrong one the person supplies each action (a takeover)."
        )
        corrected_steps = 0
        for (family, seed), device in zip(failed, self.phones, strict=False):
            task_id, corrected, ok = correct_and_label(
                self.client, TASKS[family].create(seed), device, self.say
            )
            corrected_steps += corrected
            self.rows[(family, seed)].links.append(self.viewer(task_id))
            if ok is None:  # feedback is for finished tasks: say so rather than fail on a 409
                self.say("    -> [red]the task's event stream broke off before its end; not labelled[/]")
                continue
            self.rows[(family, seed)].corrected = True
            self.say(f"    -> {'done' if ok else 'not done'}, labelled by the person")
        return corrected_steps

    def _retrain_and_swap(self) -> tuple[str | None, dict[str, Any], RequestStream]:
        """The retraining job, then the gate's decision and the hot swap, with requests flowing."""
        say, client = self.say, self.client
        say(
            "\n[bold]3. Retraining[/] (POST /v1/jobs): curate the labelled traffic, train from the serving "
            "version, evaluate both versions on other instances of these tasks, register a candidate"
        )
        with RequestStream(self.base, self.token) as stream:
            job = client.start_job()
            ended = follow_job(client, job["id"], self.s.retrain_steps, self.console)
            self.clock.lap("retraining")
            candidate = (ended.get("detail") or {}).get("candidate")
            if ended["status"] != "succeeded" or not candidate:
                say(f"[red]the retraining job ended {ended['status']}: {ended.get('reason')}[/]")
            say(
                "\n[bold]4. Gate and hot swap[/]: the service compares the candidate with the serving version "
                "and, when it is not worse, swaps it into the running policy while requests keep coming"
            )
            state = gate_decision(client, candidate) if candidate else "none"
            time.sleep(1.0)  # a few requests after the flip too
        gate = (client.model(candidate)["info"] if candidate else {}).get("gate") or {}
        for reason in gate.get("reasons", []):
            say(f"  gate: {reason}")
        say(
            f"  candidate {candidate}: {state}; {stream.sent} requests answered meanwhile "
            f"({', '.join(f'{n} by {v}' for v, n in stream.versions.items())}), {len(stream.failed)} failed"
        )
        self.clock.lap("swap")
        return (candidate if state == "promoted" else None), gate, stream
