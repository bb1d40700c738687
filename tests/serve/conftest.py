"""A real uvicorn server with the app, simulated phones behind the real adb server, a real store."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from agent.episode import EpisodeSettings
from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import TextPart, Turn
from agent.settings import StoreSettings
from devices.ports import free_port
from serve import db as serve_db
from serve.api.app import create_app
from serve.api.auth import KeyStore, Scope
from serve.settings import ServeSettings

WAIT = '<think>\nwaiting\n</think>\n<action>\n{"action": "wait", "time": 0}\n</action>'
DONE = '<think>\ndone\n</think>\n<action>\n{"action": "terminate", "status": "success"}\n</action>'


class ScriptedPolicy:
    """Replays a fixed response per step (step = how many assistant turns the prompt holds)."""

    model_version = "scripted-v1"

    def __init__(self, steps: int = 3, delay_s: float = 0.0) -> None:
        self.steps = steps
        self.delay_s = delay_s
        self.calls = 0
        self.asked: list[str | None] = []  # the model name of each request
        self.systems: list[str] = []  # the system prompt of each request

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        self.calls += 1
        self.asked.append(model)
        index = sum(1 for t in turns if t.role == "assistant")
        self.systems.append(
            next(p.text for t in turns if t.role == "system" for p in t.parts if isinstance(p, TextPart))
        )
        first_user = next(t for t in turns if t.role == "user")
        goal = next(p.text for p in first_user.parts if isinstance(p, TextPart))
        await asyncio.sleep(self.delay_s)
        steps = int(goal.split("#steps=")[1].split()[0]) if "#steps=" in goal else self.steps
        raw = DONE if index >= steps - 1 else WAIT
        return PolicyResult.from_text(raw, model_version=model or self.model_version, latency_s=self.delay_s)

    async def aclose(self) -> None:
        return None


@dataclass
class Service:
    url: str
    admin: str
    agent: str
    settings: ServeSettings
    policy: ScriptedPolicy | None
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def wait_for_steps(client: httpx.Client, task_id: str, count: int, timeout: float = 30) -> None:
    """Until the task has recorded ``count`` steps (or ``timeout`` seconds pass: the test's own
    assertions then say what is missing)."""
    deadline = time.monotonic() + timeout
    while client.get(f"/v1/tasks/{task_id}").json()["steps"] < count and time.monotonic() < deadline:
        time.sleep(0.05)


def start_service(settings: ServeSettings, policy: ScriptedPolicy | None, keys: tuple[str, str]) -> Service:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, policy=policy),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,  # an open event stream does not hold the test's teardown
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("service did not start")
        time.sleep(0.05)
    return Service(f"http://127.0.0.1:{port}", keys[0], keys[1], settings, policy, server, thread)


@pytest.fixture
def make_service(tmp_path: Path, adb_server, fleet) -> Iterator:  # type: ignore[no-untyped-def,type-arg]
    while len(fleet.devices) < 4:
        fleet.add()
    for device in fleet.devices:
        device.phone.reset()
        device.phone.faults.clear()
    started: list[Service] = []
    store = StoreSettings(url=f"sqlite:///{tmp_path / 'service.db'}", screenshot_dir=tmp_path / "shots")
    keys_made: list[tuple[str, str]] = []

    def make(scripted: ScriptedPolicy | None = None, *, own_policy: bool = False, **overrides) -> Service:  # type: ignore[no-untyped-def]
        """A running service; ``own_policy`` lets the app build its policy from the settings."""
        defaults = {
            "store": store,
            "adb_servers": [f"127.0.0.1:{adb_server.port}"],
            "episode": EpisodeSettings(settle_s=0.0, max_steps=20),
            "shutdown_grace_s": 2.0,  # a test's teardown does not wait 30 s for tasks it left running
        }
        settings = ServeSettings(**{**defaults, **overrides})
        if not keys_made:
            from agent.store import make_engine

            engine = make_engine(settings.store.url)
            ks = KeyStore(engine)
            from agent.store import TrajectoryStore

            TrajectoryStore(settings.store.url, settings.store.screenshot_dir).migrate()
            serve_db.migrate(engine)
            keys_made.append(
                (ks.create("admin", {Scope.ADMIN, Scope.AGENT})[1], ks.create("agent", {Scope.AGENT})[1])
            )
            engine.dispose()
        service = start_service(settings, None if own_policy else scripted or ScriptedPolicy(), keys_made[0])
        started.append(service)
        return service

    yield make
    for service in started:
        if service.thread.is_alive():
            service.stop()
