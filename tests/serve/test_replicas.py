"""Two service replicas on one PostgreSQL database, with the same phones behind the same adb server.

What a load balancer in front of several replicas needs: one shared queue, one episode per phone
across replicas, every task run exactly once, and any replica able to stream, pause, take over
and cancel a task that another one runs. A replica that dies frees its phones when its leases
expire, and its episodes are marked interrupted.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.settings import StoreSettings
from agent.store import TrajectoryStore
from agent.trajectory import Episode, EpisodeStatus, utcnow
from serve.tasks.cluster import Cluster, device_key
from tests.serve.conftest import ScriptedPolicy
from tests.serve.test_api import wait_finished

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def replicas(fresh_postgres_url: str, make_service, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = StoreSettings(url=fresh_postgres_url, screenshot_dir=tmp_path / "shared-shots")

    def start(name: str, policy: ScriptedPolicy, **overrides):  # type: ignore[no-untyped-def]
        return make_service(policy, store=store, replica_id=name, device_lease_ttl_s=30.0, **overrides)

    return start


def test_two_replicas_share_one_queue_run_each_task_once_and_never_two_on_one_phone(replicas) -> None:  # type: ignore[no-untyped-def]
    a = replicas("replica-a", ScriptedPolicy(steps=3, delay_s=0.05))
    b = replicas("replica-b", ScriptedPolicy(steps=3, delay_s=0.05))
    clients = [a.client(a.agent), b.client(b.agent)]
    ids = [clients[i % 2].post("/v1/tasks", json={"goal": f"task {i}"}).json()["id"] for i in range(16)]
    finished = [wait_finished(clients[0], i, timeout=150) for i in ids]
    assert {t["status"] for t in finished} == {"succeeded"}
    assert all(t["steps"] == 3 for t in finished)
    assert a.policy.calls + b.policy.calls == 16 * 3  # every task ran once, on one replica
    assert a.policy.calls > 0
    assert b.policy.calls > 0
    by_device: dict[str, list[tuple[str, str]]] = {}
    for t in finished:
        by_device.setdefault(t["device"], []).append((t["started_at"], t["finished_at"]))
    for spans in by_device.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, "two episodes overlapped on one phone"


def test_any_replica_streams_pauses_takes_over_and_cancels_a_task_another_one_runs(replicas) -> None:  # type: ignore[no-untyped-def]
    a = replicas("replica-a", ScriptedPolicy(steps=1000, delay_s=0.2))
    b = replicas("replica-b", ScriptedPolicy(steps=1000, delay_s=0.2))
    task_id = a.client(a.agent).post("/v1/tasks", json={"goal": "long", "max_steps": 200}).json()["id"]
    deadline = time.monotonic() + 30
    while a.policy.calls + b.policy.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    owner, other = (a, b) if a.policy.calls else (b, a)
    client = other.client(other.agent)
    assert client.get("/v1/devices").json()  # the other replica lists the phone as held by the task
    assert task_id in [d["leased_by"] for d in client.get("/v1/devices").json()]

    live = []
    with client.stream("GET", f"/v1/tasks/{task_id}/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                live.append(json.loads(line.removeprefix("data: ")))
                if sum(s["revision"] == 1 for s in live) >= 4:
                    break
    finals = [s["index"] for s in live if s["revision"] == 1]  # a step read before its action ran comes again
    assert finals == list(range(len(finals)))

    assert client.post(f"/v1/tasks/{task_id}/pause").json()["paused"] is True
    assert owner.client(owner.agent).get(f"/v1/tasks/{task_id}").json()["paused"] is True
    mine = owner.client(owner.agent)

    def held() -> int:
        """The index of the step held for the client (only the owner knows it), once one is."""
        deadline = time.monotonic() + 30
        while (
            step := mine.get(f"/v1/tasks/{task_id}").json()["held"]
        ) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert step is not None
        return int(step["index"])

    index = held()
    supplied = {"action": "click", "coordinate": [540, 1200]}
    answer = client.post(f"/v1/tasks/{task_id}/takeover", json={"action": supplied, "hold": True})
    assert answer.status_code == 200
    deadline = time.monotonic() + 30
    human: list[dict] = []  # type: ignore[type-arg]
    while not human and time.monotonic() < deadline:
        human = [
            s for s in client.get(f"/v1/trajectories/{task_id}").json()["steps"] if s["source"] == "human"
        ]
        time.sleep(0.1)
    assert [s["device_action"] for s in human] == [supplied]
    assert held() == index + 1  # held again, as asked through the other replica
    assert client.post(f"/v1/tasks/{task_id}/resume", json={"hold": True}).status_code == 200
    deadline = time.monotonic() + 30
    while mine.get(f"/v1/tasks/{task_id}").json()["steps"] < index + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held() == index + 2  # the policy's own action went on for one step only
    assert mine.get(f"/v1/trajectories/{task_id}").json()["steps"][index + 1]["source"] == "policy"

    before = client.get(f"/v1/tasks/{task_id}").json()["steps"]
    cancelled = client.post(f"/v1/tasks/{task_id}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["steps"] <= before + 2  # within a step of the request, plus one poll
    assert b.policy.calls == 0 or a.policy.calls == 0  # it never moved between replicas


def test_a_dead_replicas_episode_is_interrupted_and_its_phone_freed_while_live_leases_hold(
    replicas, fresh_postgres_url: str, tmp_path: Path, fleet
) -> None:  # type: ignore[no-untyped-def]
    ghost_store = TrajectoryStore(fresh_postgres_url, tmp_path / "ghost-shots")
    ghost_store.migrate()
    a = replicas("replica-a", ScriptedPolicy(steps=2, delay_s=0.05))  # migrates the service tables too
    server = a.settings.adb_servers[0]
    dead_phone, busy_phone = fleet.devices[0].serial, fleet.devices[1].serial

    # A replica that died mid-episode: its lease ran out. Another, alive, holds a second phone.
    dead = Episode(goal="left behind", status=EpisodeStatus.RUNNING, started_at=utcnow())
    alive = Episode(goal="running elsewhere", status=EpisodeStatus.RUNNING, started_at=utcnow())
    for episode in (dead, alive):
        ghost_store.save_episode(episode)
    assert Cluster(ghost_store.engine, "replica-dead", lease_ttl_s=0.01).lease(
        device_key(server, dead_phone), dead.id
    )
    live_lease = Cluster(ghost_store.engine, "replica-alive", lease_ttl_s=600)
    assert live_lease.lease(device_key(server, busy_phone), alive.id)

    client = a.client(a.agent)
    deadline = time.monotonic() + 20
    while client.get(f"/v1/tasks/{dead.id}").json()["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.get(f"/v1/tasks/{dead.id}").json()["status"] == "interrupted"
    assert client.get(f"/v1/tasks/{alive.id}").json()["status"] == "running"

    on_dead = client.post("/v1/tasks", json={"goal": "reuse", "device": {"serial": dead_phone}}).json()["id"]
    on_busy = client.post("/v1/tasks", json={"goal": "wait", "device": {"serial": busy_phone}}).json()["id"]
    assert wait_finished(client, on_dead)["status"] == "succeeded"
    time.sleep(2)
    assert client.get(f"/v1/tasks/{on_busy}").json()["status"] == "pending"  # the live lease holds
    with ghost_store.engine.begin() as conn:  # the other replica finishes its episode
        conn.execute(sa.text("DELETE FROM device_leases WHERE episode_id = :id"), {"id": alive.id})
    assert wait_finished(client, on_busy)["status"] == "succeeded"
    ghost_store.engine.dispose()
