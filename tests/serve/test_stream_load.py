"""The event stream under load: 64 episodes at once on 64 simulated phones, each watched over SSE.

At 64 phones the stream once lost a third of the steps' final forms (a step read from the store
before its action ran was marked seen, and its finished copy skipped). Every client must get
every step, and its last copy of each step must be the finished one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agent.episode import EpisodeSettings
from devices.ports import free_port
from serve.api.client import AgentClient
from tests.serve.conftest import ScriptedPolicy
from tests.serve.test_api import wait_finished

PHONES = 64
STEPS = 3
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def many_phones() -> Iterator[str]:
    """64 simulated phones behind their own adb server (the shared one keeps its four)."""
    from devices.adb_server import AdbServer
    from devices.sim.fleet import SimFleet

    server = AdbServer(port=free_port()).start()
    try:
        with SimFleet(server) as fleet:
            for _ in range(PHONES):
                fleet.add()
            yield f"127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_64_watched_episodes_each_stream_every_step_in_its_final_form(make_service, many_phones) -> None:  # type: ignore[no-untyped-def]
    # settle_s above the stream's quiet second: a poll then finds each step before its action ran
    service = make_service(
        ScriptedPolicy(steps=STEPS),
        adb_servers=[many_phones],
        episode=EpisodeSettings(settle_s=1.2, max_steps=10),
    )
    client = service.client(service.agent)
    task_ids = [client.post("/v1/tasks", json={"goal": f"load {i}"}).json()["id"] for i in range(PHONES)]
    streams: dict[str, list] = {t: [] for t in task_ids}  # type: ignore[type-arg]

    def listen(task_id: str) -> None:
        with AgentClient(service.url, service.agent, timeout=300) as typed:
            streams[task_id].extend(typed.events(task_id))

    listeners = [threading.Thread(target=listen, args=(t,)) for t in task_ids]
    for listener in listeners:
        listener.start()
    for task_id in task_ids:
        assert wait_finished(client, task_id, timeout=400)["status"] == "succeeded"
    for listener in listeners:
        listener.join(120)

    missing, unfinished = [], []
    for task_id, events in streams.items():
        last = {data.index: data for kind, data in events if kind == "step"}
        if sorted(last) != list(range(STEPS)):
            missing.append((task_id, sorted(last)))
        unfinished += [(task_id, i) for i, s in last.items() if s.ended_at is None or s.device_s is None]
        assert [kind for kind, _ in events][-1:] == ["end"], task_id
    assert not missing, f"{len(missing)} streams lack steps: {missing[:5]}"
    assert not unfinished, f"{len(unfinished)} steps never sent finished: {unfinished[:5]}"
