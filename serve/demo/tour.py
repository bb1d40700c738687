"""``uis1 demo --no-loop``: the quick tour of the whole service on one machine, nothing configured.

Starts simulated phones behind a private adb server, the store on SQLite, a policy, and the API;
submits a few phone tasks over HTTP, prints their steps as they stream in, and checks each task
on the phone afterwards. The policy is the best one available, and the demo says which:

- ``vllm``: the endpoint in ``UIS1_POLICY__BASE_URL``, when it answers (a real UI-S1 server);
- ``local``: the checkpoint in ``UIS1_LOCAL_MODEL_DIR``;
- ``tiny``: a random-weight Qwen2.5-VL built here (it shows the machinery; it cannot do tasks);
- ``expert``: the simulated tasks' own solvers behind the policy interface (always succeeds).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import typer

from agent.episode import EpisodeSettings
from agent.geometry import ResizeSettings
from agent.policy import Policy, PolicyResult, SamplingSettings
from agent.prompt import PromptSettings, TextPart, Turn
from agent.settings import StoreSettings
from devices.ports import free_port
from serve.settings import ServeSettings

if TYPE_CHECKING:
    from devices.sim.fleet import SimDevice, SimFleet
    from devices.sim.tasks import Task
    from serve.api.client import AgentClient

    Submitted = tuple[str, Task, SimDevice]  # task id, the task, its phone

DEMO_TASKS = ("wifi_on", "reply_to_message", "add_alarm", "phone_number_question")


class SimExpertPolicy:
    """Routes each goal to the expert of the simulated task it came from."""

    model_version = "sim-expert"

    def __init__(self) -> None:
        self.experts: dict[str, Policy] = {}

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        first = next(t for t in turns if t.role == "user")
        text = next(p.text for p in first.parts if isinstance(p, TextPart))
        goal = text.removeprefix("User Instruction: ").split("\n", 1)[0]
        return await self.experts[goal].predict(turns, sampling=sampling, model=model)

    async def aclose(self) -> None:
        return None


@dataclass
class Choice:
    policy: Policy
    name: str
    meaning: str
    prompt: PromptSettings


def choose_policy(kind: str, data_dir: Path) -> Choice:
    settings = ServeSettings()
    if kind in ("auto", "vllm") and os.environ.get("UIS1_POLICY__BASE_URL"):
        from agent.vllm_policy import VllmPolicy

        try:
            up = httpx.get(settings.policy.base_url.rstrip("/") + "/health", timeout=3).status_code == 200
        except httpx.HTTPError:
            up = False
        if up or kind == "vllm":
            prompt = settings.prompt_settings()
            return Choice(
                VllmPolicy(settings.policy, prompt=prompt),
                f"vLLM at {settings.policy.base_url} (model {settings.policy.model})",
                "a real policy: success depends on the model",
                prompt,
            )
    if kind in ("auto", "local") and settings.local_model_dir:
        from agent.local_policy import LocalPolicy

        prompt = settings.prompt_settings()
        return Choice(
            LocalPolicy(settings.local_model_dir, prompt=prompt),
            f"local checkpoint {settings.local_model_dir}",
            "in-process transformers: success depends on the checkpoint; slow on a CPU",
            prompt,
        )
    if kind in ("auto", "tiny"):
        try:
            from agent.devkit.tiny_model import ensure_tiny_model
            from agent.local_policy import LocalPolicy
        except ImportError:
            if kind == "tiny":
                raise
        else:
            model_dir = ensure_tiny_model(data_dir / "models")
            prompt = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))
            policy = LocalPolicy(model_dir, prompt=prompt, sampling=SamplingSettings(max_tokens=32))
            return Choice(
                policy,
                f"the tiny random-weight model ({model_dir.name})",
                "random weights: every task will fail with unparseable responses. This shows the "
                "machinery; point UIS1_POLICY__BASE_URL at a UI-S1 vLLM server for real results, "
                "or run `uis1 demo --policy expert` to watch tasks succeed",
                prompt,
            )
    return Choice(
        SimExpertPolicy(),
        "the simulated tasks' expert solvers",
        "an oracle that knows each simulated app: tasks succeed; no model is involved",
        PromptSettings(),
    )


def start_service(settings: ServeSettings, policy: Policy | None) -> tuple[Any, threading.Thread, str]:
    """The service on ``settings.port`` in a thread of this process, and an admin key made for it."""
    import uvicorn

    from agent.store import TrajectoryStore
    from serve import db as serve_db
    from serve.api.app import create_app
    from serve.api.auth import KeyStore, Scope

    trajectories = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
    trajectories.migrate()
    keys = KeyStore(trajectories.engine)
    serve_db.migrate(keys.engine)
    _, token = keys.create("demo", {Scope.AGENT, Scope.ADMIN})
    trajectories.engine.dispose()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, policy=policy), host="127.0.0.1", port=settings.port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the service did not start on port {settings.port}")
        time.sleep(0.05)
    return server, thread, token


def stop_service(server: Any, thread: threading.Thread, *, keep_running: bool = False) -> None:
    """Stop the demo's uvicorn server; with ``keep_running``, first wait for Ctrl-C."""
    if keep_running:
        try:
            while thread.is_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    server.should_exit = True
    thread.join(30)


def run_demo(
    policy_kind: str = "auto",
    phones: int = 2,
    port: int | None = None,
    keep_running: bool = False,
    data_dir: Path | None = None,
) -> int:
    """Phones, a policy and the service; a few tasks submitted, streamed, checked on the phone and
    labelled with the check. Returns how many were not done."""
    from devices.adb_server import AdbServer
    from devices.sim.fleet import SimFleet

    data = data_dir or Path(tempfile.mkdtemp(prefix="uis1-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    typer.echo(f"data: {data}")
    adb_port = free_port()
    with AdbServer(port=adb_port) as adb, SimFleet(adb) as fleet:
        for _ in range(phones):
            device = fleet.add()
            typer.echo(f"simulated phone {device.phone.serial}: {device.serial} (1080x2400)")
        choice = choose_policy(policy_kind, data)
        typer.echo(f"policy: {choice.name}\n        {choice.meaning}")
        store = StoreSettings(
            url=f"sqlite:///{data / 'trajectories.db'}", screenshot_dir=data / "screenshots"
        )
        settings = ServeSettings(
            store=store,
            adb_servers=[f"127.0.0.1:{adb_port}"],
            port=port or free_port(),
            resize=choice.prompt.resize,
            episode=EpisodeSettings(max_steps=15, max_parse_errors=2, settle_s=0.2),
        )
        server, thread, token = start_service(settings, choice.policy)
        base = f"http://127.0.0.1:{settings.port}"
        typer.echo(f"service: {base}  (key: {token}; the API schema is at {base}/openapi.json)\n")
        from serve.api.client import AgentClient

        client = AgentClient(base, token, timeout=60)
        submitted = _submit(client, fleet, choice, count=max(1, phones) * 2)
        viewer = f"{base}/viewer/tasks/{{}}#key={token}"
        failures = sum(not _watch_and_check(client, *one, viewer=viewer) for one in submitted)
        typer.echo(f"\n{len(submitted) - failures}/{len(submitted)} tasks done with {choice.name}.")
        typer.echo(f"trajectories are kept in {data}; the viewer links need the service: add --keep-running")
        if keep_running:
            typer.echo("the service keeps running; Ctrl-C stops it")
        stop_service(server, thread, keep_running=keep_running)  # the service closes the policy
    return failures


def _submit(client: AgentClient, fleet: SimFleet, choice: Choice, *, count: int) -> list[Submitted]:
    """The demo's tasks, each set up on a phone (round robin) and submitted through the API."""
    from devices.sim.tasks import TASKS

    submitted = []
    for i, name in enumerate(DEMO_TASKS[:count]):
        task = TASKS[name].create(i)
        device = fleet.devices[i % len(fleet.devices)]
        task.initialize(device.phone)
        if isinstance(choice.policy, SimExpertPolicy):
            from agent.devkit.expert_policy import ExpertPolicy

            choice.policy.experts[task.goal] = ExpertPolicy(task, device.phone)
        created = client.create_task(task.goal, device={"serial": device.serial})
        submitted.append((created.id, task, device))
        typer.echo(f"submitted {created.id[:8]} on {device.phone.serial}: {task.goal}")
    return submitted


def _watch_and_check(
    client: AgentClient, task_id: str, task: Task, device: SimDevice, *, viewer: str
) -> bool:
    """Print a task's steps as they stream, check the phone, and label the task with the check."""
    from devices.sim.tasks import Outcome
    from serve.api.schemas import StepResponse

    typer.echo(f"\n[{task_id[:8]}] {task.goal}")
    for kind, payload in client.events(task_id):
        if kind == "step" and isinstance(payload, StepResponse) and payload.revision == 1:
            what = json.dumps(payload.device_action) if payload.device_action else payload.parse_error
            typer.echo(f"  step {payload.index + 1}: {what}  (policy {payload.policy_s or 0:.2f}s)")
        elif kind == "end" and isinstance(payload, dict):
            end = f": {payload['error']}" if payload.get("error") else ""
            typer.echo(f"  -> {payload['status']}{end}")
    result = client.task(task_id)
    ok = task.is_successful(device.phone, Outcome(answer=result.answer))
    # The check is a trusted label: this episode can become training data (`uis1 retrain`).
    client.feedback(task_id, "success" if ok else "failure", source="checker")
    typer.echo(f"  checked on the phone: {'done' if ok else 'not done'}")
    typer.echo(f"  viewer: {viewer.format(task_id)}")
    return ok
