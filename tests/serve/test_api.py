"""The API over HTTP against a running uvicorn server."""

from __future__ import annotations

import itertools
import json
import time

import httpx
import pytest

from tests.serve.conftest import ScriptedPolicy, wait_for_steps

pytestmark = pytest.mark.timeout(180)


def wait_finished(client: httpx.Client, task_id: str, timeout: float = 60) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = client.get(f"/v1/tasks/{task_id}").json()
        if task["status"] not in ("pending", "running"):
            return task  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} did not finish")


OPEN = {("GET", "/healthz"), ("GET", "/readyz")}
SIGN_IN = ("POST", "/v1/session")  # takes the key in its body
JSON = {"Content-Type": "application/json"}
ADMIN = {
    ("POST", "/v1/devices/connect"),
    ("POST", "/v1/devices/{serial}/release"),
    ("POST", "/v1/models"),
    ("POST", "/v1/models/promote"),
    ("POST", "/v1/models/rollback"),
    ("POST", "/v1/models/stage"),
    ("POST", "/v1/jobs"),
}


def _admin_routes() -> set[tuple[str, str]]:
    """The app's routes that depend on the admin key (so a new admin route is checked too)."""
    from serve.api.app import ROUTERS
    from serve.api.deps import admin_routes

    return {(method, route.path) for route in admin_routes(ROUTERS) for method in route.methods}


def _routes(service) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Every route of the live app: its OpenAPI schema plus the pages kept out of it."""
    schema = service.client(service.admin).get("/openapi.json").json()
    routes = [(method.upper(), path) for path, item in schema["paths"].items() for method in item]
    return sorted([*routes, ("GET", "/openapi.json"), ("GET", "/viewer"), ("GET", "/viewer/tasks/{task_id}")])


def test_every_route_but_health_needs_a_key_and_admin_routes_need_admin(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    anonymous = service.client()
    assert anonymous.get("/healthz").status_code == 200
    assert anonymous.get("/readyz").status_code in (200, 503)
    routes = _routes(service)
    assert len(routes) > 25
    admin = _admin_routes()
    assert admin >= ADMIN  # the routes known to be admin-only still are
    assert set(routes) >= admin
    wrong = service.client("uis1_nope_secret")
    agent = service.client(service.agent)
    for method, template in routes:
        if (method, template) in OPEN:
            continue
        path = template.replace("{", "").replace("}", "")  # any value: auth comes first
        if (method, template) == SIGN_IN:
            assert (
                anonymous.post(
                    path, json={"key": "uis1_nope_secret"}, headers={"X-UIS1-CSRF": "1"}
                ).status_code
                == 401
            )
            continue
        # The key is checked before the body is read: a body that is not JSON changes nothing.
        assert anonymous.request(method, path, content=b"{", headers=JSON).status_code == 401, (
            method,
            template,
        )
        assert wrong.request(method, path, content=b"{", headers=JSON).status_code == 401, (method, template)
        if (method, template) in admin:  # the scope too is decided before the body is parsed
            assert agent.request(method, path, content=b"not json", headers=JSON).status_code == 403, (
                method,
                template,
            )
    assert anonymous.get("/openapi.json").status_code == 401
    assert agent.get("/v1/devices").status_code == 200


def test_a_task_runs_to_completion_and_its_stream_shows_every_step(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=4))
    client = service.client(service.agent)
    created = client.post("/v1/tasks", json={"goal": "Open the Clock app"})
    assert created.status_code == 202
    task_id = created.json()["id"]
    events = []
    with client.stream("GET", f"/v1/tasks/{task_id}/events") as stream:
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
                if kind == "end":
                    break
    steps = [data for kind, data in events if kind == "step"]
    assert [s["index"] for s in steps] == [0, 1, 2, 3]
    assert steps[-1]["action"] == {"action": "terminate", "status": "success"}
    assert all(s["thought"] and s["screenshot_url"] and s["model_version"] == "scripted-v1" for s in steps)
    assert events[-1] == ("end", {"status": "succeeded", "error": None, "answer": None})
    png = client.get(steps[0]["screenshot_url"])
    assert png.status_code == 200
    assert png.content.startswith(b"\x89PNG")
    task = wait_finished(client, task_id)
    assert task["steps"] == 4
    feedback = client.post(f"/v1/tasks/{task_id}/feedback", json={"outcome": "success", "comment": "fine"})
    assert feedback.status_code == 200
    assert feedback.json()["task"]["feedback"] == "success"


def test_twenty_tasks_on_four_phones_all_finish_never_two_on_one_phone(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=3, delay_s=0.05))
    client = service.client(service.agent)
    ids = [client.post("/v1/tasks", json={"goal": f"task {i}"}).json()["id"] for i in range(20)]
    finished = [wait_finished(client, i, timeout=150) for i in ids]
    assert {t["status"] for t in finished} == {"succeeded"}
    by_device: dict[str, list[tuple[str, str]]] = {}
    for t in finished:
        by_device.setdefault(t["device"], []).append((t["started_at"], t["finished_at"]))
    assert len(by_device) >= 2
    for spans in by_device.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, "two episodes overlapped on one phone"


def test_a_full_queue_answers_429_with_retry_after(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.2), max_queue=2)
    client = service.client(service.agent)
    busy = {"serial": client.get("/v1/devices").json()[0]["serial"]}  # one task holds it: the rest wait
    holder = client.post("/v1/tasks", json={"goal": "long", "max_steps": 200, "device": busy}).json()["id"]
    wait_for_steps(client, holder, 1)
    assert client.post("/v1/tasks", json={"goal": "a", "device": busy}).status_code == 202
    assert client.post("/v1/tasks", json={"goal": "b", "device": busy}).status_code == 202
    full = client.post("/v1/tasks", json={"goal": "c", "device": busy})
    assert full.status_code == 429
    assert int(full.headers["Retry-After"]) > 0


def test_a_task_for_a_device_no_pool_knows_is_refused_not_queued_forever(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1))
    client = service.client(service.agent)
    serial = client.get("/v1/devices").json()[0]["serial"]
    for selector in ({"serial": "no-such-phone"}, {"model": "Pixel 99"}, {"labels": {"rack": "b"}}):
        refused = client.post("/v1/tasks", json={"goal": "Turn on Wi-Fi", "device": selector})
        assert refused.status_code == 422, (selector, refused.text)
        assert "connect it first" in refused.json()["detail"]
    assert client.get("/v1/tasks").json()["tasks"] == []  # nothing was queued
    accepted = client.post("/v1/tasks", json={"goal": "Turn on Wi-Fi", "device": {"serial": serial}})
    assert accepted.status_code == 202
    assert wait_finished(client, accepted.json()["id"])["status"] == "succeeded"


def test_a_store_that_does_not_answer_gets_503_with_retry_after_and_the_service_recovers(
    make_service,
) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    service = make_service(ScriptedPolicy(steps=1))
    client = service.client(service.agent)
    path = service.settings.store.url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, timeout=30)
    blocker.execute("BEGIN EXCLUSIVE")  # another writer holds the database past the busy timeout
    try:
        refused = client.post("/v1/tasks", json={"goal": "Turn on Wi-Fi"})
    finally:
        blocker.rollback()
        blocker.close()
    assert refused.status_code == 503, refused.text
    assert "retry" in refused.json()["detail"]
    assert int(refused.headers["Retry-After"]) > 0
    accepted = client.post("/v1/tasks", json={"goal": "Turn on Wi-Fi"})
    assert accepted.status_code == 202
    assert wait_finished(client, accepted.json()["id"])["status"] == "succeeded"


def test_a_key_store_that_does_not_answer_gets_503_with_retry_after_not_401(  # type: ignore[no-untyped-def]
    make_service, monkeypatch
) -> None:
    """The key check runs before the route, on its own path: a key lookup the database does not
    answer is the store's 503 with Retry-After there too, neither a 401 nor a 500."""
    import sqlalchemy.exc

    from serve.api.auth import KeyStore

    service = make_service(ScriptedPolicy(steps=1))
    client = service.client(service.agent)

    def unanswered(self, token):  # type: ignore[no-untyped-def]
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))

    monkeypatch.setattr(KeyStore, "verify", unanswered)
    refused = client.get("/v1/devices")
    assert refused.status_code == 503, refused.text
    assert int(refused.headers["Retry-After"]) > 0
    monkeypatch.undo()
    assert client.get("/v1/devices").status_code == 200


def test_idempotency_key_returns_the_same_task(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    client = service.client(service.agent)
    first = client.post("/v1/tasks", json={"goal": "once", "idempotency_key": "k-1"})
    again = client.post("/v1/tasks", json={"goal": "once", "idempotency_key": "k-1"})
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]


def test_cancel_stops_a_running_task_within_a_step(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.2))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "long", "max_steps": 200}).json()["id"]
    wait_for_steps(client, task_id, 2)
    before = client.get(f"/v1/tasks/{task_id}").json()["steps"]
    cancelled = client.post(f"/v1/tasks/{task_id}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["steps"] <= before + 1


def test_a_restart_mid_run_keeps_recorded_steps_and_marks_the_episode_interrupted(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.2), shutdown_grace_s=0.5)
    client = service.client(service.agent)
    phone = {"serial": client.get("/v1/devices").json()[0]["serial"]}  # the running task holds it
    running = client.post("/v1/tasks", json={"goal": "long", "max_steps": 200, "device": phone}).json()["id"]
    queued = client.post("/v1/tasks", json={"goal": "later #steps=2", "device": phone}).json()["id"]
    wait_for_steps(client, running, 2)
    service.stop()
    restarted = make_service(ScriptedPolicy(steps=2))
    client = restarted.client(restarted.agent)
    episode = client.get(f"/v1/tasks/{running}").json()
    assert episode["status"] == "interrupted"
    assert episode["error"] == "the service stopped while it ran"
    assert episode["finished_at"] is not None  # ended when the service stopped: retention counts from it
    assert episode["steps"] >= 2
    assert wait_finished(client, queued)["status"] == "succeeded"  # still queued after restart, and run


def test_metrics_expose_tasks_queue_latency_devices_and_model(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=2))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "measure me"}).json()["id"]
    wait_finished(client, task_id)
    text = client.get("/metrics").text
    for name in (
        "uis1_tasks_total",
        "uis1_queue_depth",
        'uis1_step_seconds_bucket{le="0.01",phase="policy"}',
        'phase="device"',
        'phase="overhead"',
        "uis1_parse_errors_total",
        'uis1_devices{state="device"}',
        'uis1_model_info{version="scripted-v1"}',
    ):
        assert name in text, name
    # The relay of vLLM's own metrics says plainly when no engine answers (nothing listens here).
    relayed = client.get("/metrics/vllm")
    assert relayed.status_code == 502
    assert "vLLM metrics unavailable" in relayed.json()["detail"]


def test_readiness_requires_only_the_configured_checks(make_service) -> None:  # type: ignore[no-untyped-def]
    from agent.vllm_policy import VllmSettings

    down = VllmSettings(base_url="http://127.0.0.1:9", connect_timeout_s=0.5, max_retries=0)
    strict = make_service(own_policy=True, policy=down)
    body = strict.client().get("/readyz")
    assert body.status_code == 503
    assert body.json()["checks"]["policy"] is False
    strict.stop()
    lenient = make_service(own_policy=True, policy=down, readiness_checks=["database"])
    body = lenient.client().get("/readyz")
    assert body.status_code == 200, body.text
    assert body.json() == {
        "ready": True,
        "checks": {"database": True, "policy": False, "device": True},
        "required": ["database"],
        "images": {"transport": "resized", "why": None},  # a policy handed in is not probed
        "serving": None,  # no version promoted yet (then: its name and whether its weights were verified)
    }


def test_takeover_records_the_supplied_step_as_expert(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.1))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "needs a hand", "max_steps": 200}).json()["id"]
    wait_for_steps(client, task_id, 1)
    assert (
        client.post(
            f"/v1/tasks/{task_id}/takeover", json={"action": {"action": "click", "coordinate": [5, 5]}}
        ).status_code
        == 409
    )
    assert client.post(f"/v1/tasks/{task_id}/pause").status_code == 200
    bad = client.post(f"/v1/tasks/{task_id}/takeover", json={"action": {"action": "fly"}})
    assert bad.status_code == 422
    assert client.post(f"/v1/tasks/{task_id}/pause").status_code == 200
    supplied = {"action": "click", "coordinate": [540, 1200]}
    assert client.post(f"/v1/tasks/{task_id}/takeover", json={"action": supplied}).status_code == 200
    deadline = time.monotonic() + 30
    human: list[dict] = []  # type: ignore[type-arg]
    while not human and time.monotonic() < deadline:
        steps = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
        human = [s for s in steps if s["source"] == "human"]
        time.sleep(0.05)
    client.post(f"/v1/tasks/{task_id}/cancel")
    assert len(human) == 1
    assert human[0]["device_action"] == supplied
    exported = client.get("/v1/trajectories/export", params={"status": "cancelled"})
    assert exported.status_code == 200
    record = json.loads(exported.text.splitlines()[0])
    assert {"action": "click", "coordinate": [540, 1200]} in [s["action_content"] for s in record["steps"]]
    assert all(s["screenshot"].startswith("/v1/screenshots/") for s in record["steps"])


def _listen(service, task_id: str):  # type: ignore[no-untyped-def]
    """A thread that collects the task's server-sent events until it ends, and the list they go in."""
    import threading

    from serve.api.client import AgentClient

    events: list = []  # type: ignore[type-arg]

    def listen() -> None:
        with AgentClient(service.url, service.agent) as typed:
            events.extend(typed.events(task_id))

    listener = threading.Thread(target=listen)
    listener.start()
    return listener, events


def _held(client: httpx.Client, task_id: str, index: int, timeout: float = 30) -> dict:  # type: ignore[type-arg]
    """The task's held step once it is step ``index`` (the test fails when it never gets there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = client.get(f"/v1/tasks/{task_id}").json()["held"]
        if held is not None and held["index"] == index:
            return held  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"step {index} of task {task_id} was never held (now: {held})")


def test_a_person_drives_a_task_step_by_step_seeing_what_the_policy_proposes(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.05))
    client = service.client(service.agent)
    body = {"goal": "drive me", "max_steps": 200, "paused": True}  # held from its first step
    task_id = client.post("/v1/tasks", json=body).json()["id"]
    index = 0
    held = _held(client, task_id, index)
    assert held["proposed_action"]["action"]
    assert held["raw_response"]
    # The policy's action goes on for one step; the next is held again.
    assert client.post(f"/v1/tasks/{task_id}/resume", json={"hold": True}).status_code == 200
    _held(client, task_id, index + 1)
    supplied = {"action": "click", "coordinate": [540, 1200]}
    answer = client.post(f"/v1/tasks/{task_id}/takeover", json={"action": supplied, "hold": True})
    assert answer.status_code == 200, answer.text
    _held(client, task_id, index + 2)
    time.sleep(0.5)  # held means held: nothing more happens while the person looks
    assert client.get(f"/v1/tasks/{task_id}").json()["steps"] == index + 2
    steps = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
    assert [s["source"] for s in steps[index:]] == ["policy", "human"]
    assert steps[index]["device_action"] == held["proposed_action"]
    assert steps[index + 1]["device_action"] == supplied
    assert client.post(f"/v1/tasks/{task_id}/resume").status_code == 200  # and it runs on by itself
    wait_for_steps(client, task_id, index + 5)
    assert client.get(f"/v1/tasks/{task_id}").json()["held"] is None
    client.post(f"/v1/tasks/{task_id}/cancel")


def test_the_stream_says_a_step_waits_to_a_client_that_connects_after_the_hold_and_live(
    make_service, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A client waits on the stream, not on a clock: a ``held`` event on connecting when a step waits
    already (its index and the policy's proposal), and one when the next step starts waiting; the
    keep-alive pings of a stream with nothing to say meanwhile do not break the client."""
    import threading

    import fastapi.routing

    from serve.api.client import AgentClient

    monkeypatch.setattr(fastapi.routing, "_PING_INTERVAL", 0.1)  # 15 s in production

    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.05))
    client = service.client(service.agent)
    body = {"goal": "drive me", "max_steps": 200, "paused": True}
    task_id = client.post("/v1/tasks", json=body).json()["id"]
    first = _held(client, task_id, 0)  # held before anyone listens
    events: list = []  # type: ignore[type-arg]
    connected = threading.Event()

    def listen() -> None:
        with AgentClient(service.url, service.agent) as typed:
            for kind, data in typed.events(task_id):
                events.append((kind, data))
                if kind == "held":
                    connected.set()

    listener = threading.Thread(target=listen)
    listener.start()
    assert connected.wait(30), f"no held event on connecting: {events}"
    assert events[-1] == ("held", {"index": 0, "reason": None, "proposed_action": first["proposed_action"]})
    time.sleep(0.5)  # the person looks; the stream pings
    assert listener.is_alive()
    assert client.post(f"/v1/tasks/{task_id}/resume", json={"hold": True}).status_code == 200
    second = _held(client, task_id, 1)
    client.post(f"/v1/tasks/{task_id}/cancel")
    listener.join(30)
    held = [data for kind, data in events if kind == "held"]
    assert held == [
        {"index": 0, "reason": None, "proposed_action": first["proposed_action"]},
        {"index": 1, "reason": None, "proposed_action": second["proposed_action"]},
    ]
    assert events[-1][0] == "end"


def test_sensitive_actions_wait_for_a_persons_approval_and_the_decision_is_recorded(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=3, delay_s=0.05))
    client = service.client(service.agent)

    body = {"goal": "finish only if I agree #steps=3", "approval": {"actions": ["terminate"]}, "paused": True}
    task_id = client.post("/v1/tasks", json=body).json()["id"]  # held at first, while the stream connects
    listener, events = _listen(service, task_id)
    assert _held(client, task_id, 0)["reason"] is None  # a pause, not a rule
    time.sleep(1.0)
    assert client.post(f"/v1/tasks/{task_id}/resume").status_code == 200
    held = _held(client, task_id, 2)  # the two waits went on; the terminate waits for a person
    assert held["reason"] == "terminate needs approval"
    assert held["proposed_action"]["action"] == "terminate"
    task = client.get(f"/v1/tasks/{task_id}").json()
    assert task["paused"] is True
    assert task["status"] == "running"
    assert client.post(f"/v1/tasks/{task_id}/resume").status_code == 200  # approved
    assert wait_finished(client, task_id)["status"] == "succeeded"
    listener.join(30)
    asked = [data for kind, data in events if kind == "approval"]
    assert asked == [
        {"index": 2, "reason": "terminate needs approval", "proposed_action": held["proposed_action"]}
    ]
    steps = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
    assert [s["review"] for s in steps] == [
        None,
        None,
        {"approval": "terminate needs approval", "decision": "approved"},
    ]

    # Every step, and the person supplies one instead.
    body = {"goal": "every step #steps=5", "max_steps": 10, "approval": {"every_step": True}}
    task_id = client.post("/v1/tasks", json=body).json()["id"]
    assert _held(client, task_id, 0)["reason"] == "every step needs approval (wait)"
    supplied = {"action": "system_button", "button": "Back"}
    assert client.post(f"/v1/tasks/{task_id}/takeover", json={"action": supplied}).status_code == 200
    assert _held(client, task_id, 1)["reason"] == "every step needs approval (wait)"  # and the next one too
    first = client.get(f"/v1/trajectories/{task_id}").json()["steps"][0]
    assert first["source"] == "human"
    assert first["review"] == {"approval": "every step needs approval (wait)", "decision": "replaced"}
    assert client.post(f"/v1/tasks/{task_id}/cancel").json()["status"] == "cancelled"

    # No rule: nothing waits.
    plain = client.post("/v1/tasks", json={"goal": "plain #steps=3"}).json()["id"]
    assert wait_finished(client, plain)["status"] == "succeeded"
    bad = client.post("/v1/tasks", json={"goal": "x", "approval": {"actions": ["fly"]}})
    assert bad.status_code == 422


class TypingPolicy(ScriptedPolicy):
    """Types a card number, then finishes."""

    async def predict(self, turns, *, sampling=None, model=None):  # type: ignore[no-untyped-def,override]
        from agent.policy import PolicyResult

        index = sum(1 for t in turns if t.role == "assistant")
        action = '{"action": "type", "text": "4111222233334444"}' if index == 0 else TERMINATE
        raw = f"<think>\nstep {index}\n</think>\n<action>\n{action}\n</action>"
        return PolicyResult.from_text(raw, model_version=self.model_version, latency_s=0.0)


TERMINATE = '{"action": "terminate", "status": "success"}'


def test_typing_into_a_password_field_waits_for_a_person_read_from_the_phone(make_service, fleet) -> None:  # type: ignore[no-untyped-def]
    service = make_service(TypingPolicy())
    client = service.client(service.agent)
    device = fleet.devices[0]
    shop = device.phone.app("com.example.shop")

    def at_checkout(field_name: str) -> None:  # the shop's checkout form, one of its fields focused
        device.phone.start("com.example.shop", ".CheckoutActivity")
        shop.checkout = type(shop.checkout)()
        device.phone.focus(getattr(shop.checkout, field_name))

    body = {"goal": "pay", "device": {"serial": device.serial}, "approval": {"password_fields": True}}
    at_checkout("card")  # hides what is typed: password="true" in the phone's hierarchy
    task_id = client.post("/v1/tasks", json=body).json()["id"]
    held = _held(client, task_id, 0)
    assert held["reason"] == "typing into a password field needs approval"
    assert held["proposed_action"] == {"action": "type", "text": "[secret]"}  # masked (agent.secrets)
    assert shop.checkout.card.value == ""  # nothing typed while it waits
    assert client.post(f"/v1/tasks/{task_id}/resume").status_code == 200  # approved
    assert wait_finished(client, task_id)["status"] == "succeeded"
    assert shop.checkout.card.value == "4111222233334444"
    steps = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
    assert steps[0]["review"] == {
        "approval": "typing into a password field needs approval",
        "decision": "approved",
    }

    at_checkout("name")  # an ordinary field: typing goes ahead
    task_id = client.post("/v1/tasks", json=body).json()["id"]
    assert wait_finished(client, task_id)["status"] == "succeeded"
    assert shop.checkout.name.value == "4111222233334444"
    assert [s["review"] for s in client.get(f"/v1/trajectories/{task_id}").json()["steps"]] == [None, None]


def test_models_promote_routes_new_tasks_and_rollback_restores(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1))
    admin, agent = service.client(service.admin), service.client(service.agent)
    assert agent.post("/v1/models", json={"name": "v1"}).status_code == 403
    assert admin.post("/v1/models", json={"name": "v1", "served_name": "ui-s1-7b"}).status_code == 201
    assert admin.post("/v1/models", json={"name": "v2", "served_name": "ui-s1-7b-lora-2"}).status_code == 201
    assert admin.post("/v1/models", json={"name": "v2"}).status_code == 409  # versions are immutable
    assert agent.post("/v1/models/promote", json={"version": "v2"}).status_code == 403
    assert admin.post("/v1/models/promote", json={"version": "v9"}).status_code == 404
    assert admin.post("/v1/models/promote", json={"version": "v1"}).json()["default"] == "v1"
    assert admin.post("/v1/models/promote", json={"version": "v2"}).json()["default"] == "v2"

    def served(body: dict) -> str:  # type: ignore[type-arg]
        """The version the task and each of its steps recorded, and the name the policy was asked for."""
        task = wait_finished(agent, agent.post("/v1/tasks", json=body).json()["id"])
        steps = {s["model_version"] for s in agent.get(task["trajectory_url"]).json()["steps"]}
        assert steps == {task["model_version"]}
        return f"{task['model_version']}={service.policy.asked[-1]}"

    assert served({"goal": "a"}) == "v2=ui-s1-7b-lora-2"  # the default alias
    assert served({"goal": "b", "model": "v1"}) == "v1=ui-s1-7b"  # a version by name
    states = {v["name"]: v["state"] for v in agent.get("/v1/models").json()["versions"]}
    assert states == {"v1": "retired", "v2": "promoted"}
    rolled = admin.post("/v1/models/rollback", json={"reason": "answers got worse"}).json()
    assert rolled["default"] == "v1"
    assert served({"goal": "c"}) == "v1=ui-s1-7b"
    unknown = agent.post("/v1/tasks", json={"goal": "d", "model": "v9"})
    assert unknown.status_code == 422
    listed = agent.get("/v1/models").json()
    assert [v["name"] for v in listed["versions"]] == ["v1", "v2"]
    assert listed["aliases"] == {"default": "v1"}
    assert {v["name"]: v["state"] for v in listed["versions"]} == {"v1": "promoted", "v2": "rejected"}
    # The rolled-back version keeps its history, with who did what and why.
    detail = agent.get("/v1/models/v2").json()
    events = [(e["event"], e["actor"]) for e in reversed(detail["events"])]
    admin_actor = events[0][1]
    assert events[0][0] == "registered"
    assert admin_actor.startswith("key:")
    assert ("promoted", admin_actor) in events
    assert events[-1] == ("rolled_back", admin_actor)
    assert detail["events"][0]["detail"]["reason"] == "answers got worse"
    # A rejected version is promoted again only on purpose.
    refused = admin.post("/v1/models/promote", json={"version": "v2"})
    assert refused.status_code == 409
    assert "rolled_back" in refused.json()["detail"]
    forced = admin.post("/v1/models/promote", json={"version": "v2", "force": True})
    assert forced.json()["default"] == "v2"


def test_the_typed_client_covers_a_task_end_to_end(make_service) -> None:  # type: ignore[no-untyped-def]
    from serve.api.client import AgentClient, ApiError

    service = make_service(ScriptedPolicy(steps=2))
    with AgentClient(service.url, service.agent) as client:
        task = client.create_task("via the client", max_steps=5)
        events = list(client.events(task.id))
        assert [kind for kind, _ in events] == ["step", "step", "end"]
        assert client.task(task.id).status.value == "succeeded"
        assert client.trajectory(task.id).steps[-1].action == {"action": "terminate", "status": "success"}
        assert any(d.state == "device" for d in client.devices())
        assert client.feedback(task.id, "success").task.feedback == "success"
        with pytest.raises(ApiError) as info:
            client.task("no-such-task")
        assert info.value.status == 404
    with AgentClient(service.url, "uis1_bad_key") as bad, pytest.raises(ApiError) as denied:
        bad.tasks()
    assert denied.value.status == 401


def test_a_version_is_served_with_the_system_prompt_it_was_trained_with(make_service, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from agent.prompt import SYSTEM_PROMPT

    trained = tmp_path / "compact-checkpoint"
    trained.mkdir()
    (trained / "system_prompt.txt").write_text("Act on the phone. One action per turn.", encoding="utf-8")
    service = make_service(ScriptedPolicy(steps=1))
    admin, agent = service.client(service.admin), service.client(service.agent)
    assert admin.post("/v1/models", json={"name": "stock", "served_name": "ui-s1-7b"}).status_code == 201
    made = admin.post("/v1/models", json={"name": "compact", "base": str(trained)})
    assert made.status_code == 201
    assert agent.get("/v1/models/compact").json()["info"]["system_prompt"].startswith("Act on the phone.")
    wait_finished(agent, agent.post("/v1/tasks", json={"goal": "a", "model": "compact"}).json()["id"])
    assert service.policy.systems[-1] == "Act on the phone. One action per turn."
    wait_finished(agent, agent.post("/v1/tasks", json={"goal": "b", "model": "stock"}).json()["id"])
    assert service.policy.systems[-1] == SYSTEM_PROMPT  # a version without one: the service's


def test_the_stream_sends_every_step_in_its_final_form(make_service) -> None:  # type: ignore[no-untyped-def]
    """A step read from the store before its action ran (the stream's poll after a quiet second)
    is sent again when final; pauses and resumes are events too."""

    from agent.episode import EpisodeSettings

    service = make_service(ScriptedPolicy(steps=3), episode=EpisodeSettings(settle_s=1.5, max_steps=10))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "Open the Clock app"}).json()["id"]
    listener, events = _listen(service, task_id)
    wait_for_steps(client, task_id, 1)
    assert client.post(f"/v1/tasks/{task_id}/pause").status_code == 200
    assert client.post(f"/v1/tasks/{task_id}/resume").status_code == 200
    listener.join(60)
    steps = [data for kind, data in events if kind == "step"]
    last = {s.index: s for s in steps}  # the highest revision comes last
    assert sorted(last) == [0, 1, 2]
    assert all(s.revision == 1 and s.ended_at is not None and s.device_s for s in last.values())
    assert any(s.revision == 0 for s in steps)  # the case that lost steps: sent before its action ran
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "end"
    assert kinds.index("paused") < kinds.index("resumed")
