"""Hostile and careless input: a 4xx that names the problem, never a 500, and nothing read,
decoded or forwarded before it has passed its checks."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from PIL import Image

from tests.serve.conftest import ScriptedPolicy, Service, wait_for_steps
from tests.serve.test_api import wait_finished

pytestmark = pytest.mark.timeout(240)

MB = 1024 * 1024


def b64_png(width: int, height: int, mode: str = "RGB") -> str:
    buf = io.BytesIO()
    Image.new(mode, (width, height), "white").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


SHOT = b64_png(100, 200)


def message(reply: httpx.Response) -> str:
    """The error as one text: a string detail, or each validation error as ``loc: msg``."""
    detail = reply.json()["detail"]
    if isinstance(detail, str):
        return detail
    assert all(set(e) == {"type", "loc", "msg"} for e in detail), detail  # never the input echoed
    return "; ".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in detail)


def task(**fields: Any) -> dict[str, Any]:
    return {"goal": "g", **fields}


def predict(**fields: Any) -> dict[str, Any]:
    return {"goal": "g", "screenshots": [SHOT], **fields}


def gif() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (10, 10)).save(buf, format="GIF")
    return base64.b64encode(buf.getvalue()).decode()


@dataclass
class Case:
    name: str
    path: str  # {task}: a finished task's id
    body: bytes | dict[str, Any]  # a dict goes as Python writes JSON: NaN, Infinity and "\ud800" as they are
    status: int
    words: list[str] = field(default_factory=list)  # what the message must name
    content_type: str | None = "application/json"


TASKS, PREDICT, FEEDBACK = "/v1/tasks", "/v1/predict", "/v1/tasks/{task}/feedback"
NAN, INF = float("nan"), float("inf")
LABELS = "body.device.labels"
PASSWD = "../../etc/passwd"

BAD_INPUTS = [
    Case("NaN steps", TASKS, task(max_steps=NAN), 422, ["body.max_steps", "NaN"]),
    Case("infinite steps", TASKS, task(max_steps=INF), 422, ["body.max_steps", "Infinity"]),
    Case("-Infinity timeout", TASKS, task(timeout_s=-INF), 422, ["body.timeout_s", "-Infinity"]),
    Case(
        "timeout past float", TASKS, b'{"goal": "g", "timeout_s": 1e999}', 422, ["body.timeout_s", "Infinity"]
    ),
    Case(
        "NaN temperature",
        TASKS,
        task(sampling={"temperature": NAN}),
        422,
        ["body.sampling.temperature", "NaN"],
    ),
    Case("surrogate goal", TASKS, {"goal": "\ud800"}, 422, ["body.goal", "surrogate"]),
    Case("surrogate as UTF-8", TASKS, b'{"goal": "\xed\xa0\x80"}', 422, ["body.goal", "surrogate"]),
    Case("surrogate label", TASKS, task(device={"labels": {"\udc00": "x"}}), 422, [LABELS, "surrogate"]),
    Case("not JSON", TASKS, b'{"goal": ', 422, ["body", "not valid JSON"]),
    Case("not UTF-8", TASKS, b'{"goal": "\xff"}', 422, ["body", "not valid JSON", "utf-8"]),
    Case("not UTF-8, not JSON", TASKS, b"\xff\xfe\xfd", 422, ["body"], content_type=None),
    Case("20001 values", TASKS, task(x=[0] * 20_001), 422, ["body", "too many values"]),
    Case("5000 digits", TASKS, b'{"goal": "g", "max_steps": ' + b"9" * 5000 + b"}", 422, ["not valid JSON"]),
    Case("steps past 64 bits", TASKS, task(max_steps=2**64), 422, ["body.max_steps"]),
    Case("seed past 64 bits", TASKS, task(sampling={"seed": 2**64}), 422, ["body.sampling.seed"]),
    Case("33 labels", TASKS, task(device={"labels": {f"k{i}": "" for i in range(33)}}), 422, [LABELS, "32"]),
    Case("long label key", TASKS, task(device={"labels": {"k" * 65: ""}}), 422, [LABELS, "64"]),
    Case("long label", TASKS, task(device={"labels": {"k": "v" * 257}}), 422, [f"{LABELS}.k", "256"]),
    Case("long serial", TASKS, task(device={"serial": "s" * 257}), 422, ["body.device.serial", "256"]),
    Case("unknown model", TASKS, task(model=PASSWD), 422, ["no model version or alias", PASSWD]),
    Case(
        "infinite temperature",
        PREDICT,
        predict(sampling={"temperature": INF}),
        422,
        ["temperature", "Infinity"],
    ),
    Case(
        "NaN max_tokens",
        PREDICT,
        predict(sampling={"max_tokens": NAN}),
        422,
        ["body.sampling.max_tokens", "NaN"],
    ),
    Case("surrogate goal", PREDICT, predict(goal="\udbff"), 422, ["body.goal", "surrogate"]),
    Case(
        "surrogate history",
        PREDICT,
        predict(screenshots=[SHOT] * 2, history=["\udfff"]),
        422,
        ["body.history.0", "surrogate"],
    ),
    Case(
        "20 responses", PREDICT, predict(screenshots=[SHOT] * 20, history=["x"] * 20), 422, ["history", "19"]
    ),
    Case(
        "long response",
        PREDICT,
        predict(screenshots=[SHOT] * 2, history=["x" * 16_001]),
        422,
        ["body.history.0", "16000"],
    ),
    Case("seed past 64 bits", PREDICT, predict(sampling={"seed": -(2**63) - 1}), 422, ["body.sampling.seed"]),
    Case("unknown model", PREDICT, predict(model=PASSWD), 422, ["no model version or alias", PASSWD]),
    Case("not base64", PREDICT, predict(screenshots=["not base64!"]), 422, ["screenshot 0", "base64"]),
    Case("GIF", PREDICT, predict(screenshots=[gif()]), 415, ["screenshot 0", "GIF"]),
    Case("history of another length", PREDICT, predict(history=["x"]), 400, ["one previous response"]),
    Case(
        "surrogate comment",
        FEEDBACK,
        {"outcome": "success", "comment": "\ud800"},
        422,
        ["comment", "surrogate"],
    ),
    Case(
        "surrogate answer",
        FEEDBACK,
        {"outcome": "success", "expected_answer": "a\udfffb"},
        422,
        ["body.expected_answer", "surrogate"],
    ),
    Case("NaN outcome", FEEDBACK, {"outcome": NAN}, 422, ["body.outcome", "NaN"]),
    Case("outcome past float", FEEDBACK, b'{"outcome": [1, -1e400]}', 422, ["body.outcome.1", "-Infinity"]),
    Case("unknown task", "/v1/tasks/nope/feedback", {"outcome": "success"}, 404, ["no task nope"]),
]


def test_every_bad_input_gets_a_4xx_that_names_the_problem(make_service) -> None:  # type: ignore[no-untyped-def]
    policy = ScriptedPolicy(steps=1)
    service = make_service(policy)
    client = service.client(service.agent)
    done = wait_finished(client, client.post("/v1/tasks", json={"goal": "done at once"}).json()["id"])
    asked_before = list(policy.asked)
    wrong = []
    for case in BAD_INPUTS:
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        headers = {"Content-Type": case.content_type} if case.content_type else {}
        reply = client.post(case.path.format(task=done["id"]), content=body, headers=headers)
        name = f"{case.path} {case.name}"
        if reply.status_code != case.status or reply.headers["content-type"] != "application/json":
            wrong.append(f"{name}: {reply.status_code} {reply.text[:300]}")
            continue
        text = message(reply)
        if missing := [w for w in case.words if w not in text]:
            wrong.append(f"{name}: {text!r} does not name {missing}")
    assert not wrong, "\n".join(wrong)
    assert policy.asked == asked_before  # nothing reached the policy
    assert [t["id"] for t in client.get("/v1/tasks").json()["tasks"]] == [done["id"]]  # nothing was queued
    # Well-formed text outside the BMP (a surrogate pair) is fine.
    pair = json.dumps({"outcome": "success", "comment": "\U0001f600"})  # written as "\ud83d\ude00"
    emoji = client.post(
        f"/v1/tasks/{done['id']}/feedback", content=pair, headers={"Content-Type": "application/json"}
    )
    assert emoji.status_code == 200, emoji.text
    assert client.get(f"/v1/tasks/{done['id']}").status_code == 200


def _raw_request(service: Service, head: str, body: bytes) -> socket.socket:
    """A connection that sent ``head`` and only ``body`` of what the head announces."""
    url = urlsplit(service.url)
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(head.encode() + b"\r\n\r\n" + body)
    return sock


def _status_line(sock: socket.socket, timeout_s: float) -> str:
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0].decode()


def _health_checks(service: Service, busy: Callable[[], bool]) -> list[float]:
    """The seconds each /healthz took (each answered 200) while ``busy()`` held."""
    took = []
    with httpx.Client(base_url=service.url, timeout=30) as probe:
        while busy():
            t0 = time.perf_counter()
            assert probe.get("/healthz").status_code == 200
            took.append(time.perf_counter() - t0)
            time.sleep(0.02)
    return took


def test_a_request_without_a_key_gets_401_before_its_body_is_read(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(max_body_bytes=64 * MB)  # 50 MB is within the limit: only the key check refuses it
    # The head announces 50 MB and 1 MB follows: the answer comes without waiting for the rest.
    head = "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
    with _raw_request(service, f"{head}\r\nContent-Length: {50 * MB}", b"{" * MB) as sock:
        assert " 401 " in _status_line(sock, timeout_s=10)
        assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 200
    # Over the limit, still 401: the key is decided first. A wrong key, a cookie without the CSRF header.
    for credentials, status in (
        ("", 401),
        ("\r\nAuthorization: Bearer uis1_nope_secret", 401),
        ("\r\nCookie: uis1_key=x", 403),
    ):
        with _raw_request(service, f"{head}\r\nContent-Length: {10 * 1024 * MB}{credentials}", b"{") as sock:
            assert f" {status} " in _status_line(sock, timeout_s=10), credentials
    # All 50 MB of invalid JSON sent: 401, and the service answers others all along.
    replies: list[httpx.Response] = []
    upload = threading.Thread(
        target=lambda: replies.append(
            httpx.post(
                f"{service.url}/v1/tasks",
                content=b"{" * (50 * MB),
                headers={"Content-Type": "application/json"},
                timeout=60,
            )
        )
    )
    upload.start()
    answered = len(_health_checks(service, upload.is_alive))  # each one asserted 200
    upload.join()
    assert replies[0].status_code == 401
    assert "API key" in replies[0].json()["detail"]
    # Others are answered while it streams in. (How fast is not asserted: loopback sends 50 MB in a
    # fraction of a second, which a loaded machine's own scheduling can match.)
    assert answered >= 1


def test_a_body_over_the_limit_gets_413_before_the_route_runs(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.1), max_body_bytes=100_000)
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "keeps going", "max_steps": 200}).json()["id"]
    # Refused from the Content-Length: the cancel route, which reads no body, does not run.
    refused = client.post(f"/v1/tasks/{task_id}/cancel", content=b" " * 100_001)
    assert refused.status_code == 413
    assert "larger than 100000 bytes" in refused.json()["detail"]
    assert client.get(f"/v1/tasks/{task_id}").json()["status"] in ("pending", "running")
    # The head announces 10 GB and a little follows: 413 without waiting for the rest.
    head = (
        f"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {service.agent}\r\nContent-Length: {10 * 1024 * MB}"
    )
    with _raw_request(service, head, b"{" * 1000) as sock:
        assert " 413 " in _status_line(sock, timeout_s=10)

    # Streamed without a Content-Length: refused once past the limit.
    def chunks() -> Iterator[bytes]:
        yield b'{"goal": "' + b"x" * 60_000
        yield b"x" * 60_000 + b'"}'

    streamed = client.post("/v1/tasks", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in streamed.request.headers
    assert streamed.status_code == 413, streamed.text
    assert "larger than 100000 bytes" in streamed.json()["detail"]
    # Chunked, in two messages that the app receives one at a time (each under the limit, both over
    # it): the limit is on the whole body, not on each message.
    head = (
        f"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {service.agent}\r\nTransfer-Encoding: chunked"
    )
    first = b'{"goal": "' + b"x" * 60_000
    with _raw_request(service, head, b"%x\r\n%b\r\n" % (len(first), first)) as sock:
        time.sleep(0.5)  # the app has taken the first chunk as a message of its own
        second = b"x" * 60_000 + b'"}'
        with contextlib.suppress(OSError):  # refused already
            sock.sendall(b"%x\r\n%b\r\n0\r\n\r\n" % (len(second), second))
        assert " 413 " in _status_line(sock, timeout_s=10)
    # At the limit, served.
    padded = json.dumps({"goal": "fits"}).encode().ljust(100_000)
    fits = client.post("/v1/tasks", content=padded, headers={"Content-Type": "application/json"})
    assert fits.status_code == 202, fits.text
    client.post(f"/v1/tasks/{task_id}/cancel")


def test_predict_refuses_screenshots_past_the_pixel_budget_before_decoding(make_service) -> None:  # type: ignore[no-untyped-def]
    policy = ScriptedPolicy()
    service = make_service(policy, max_predict_pixels=2_500_000)
    client = service.client(service.agent)
    shot = b64_png(1000, 1000)
    fits = client.post("/v1/predict", json={"goal": "g", "screenshots": [shot] * 2, "history": ["x"]})
    assert fits.status_code == 200, fits.text
    over = client.post("/v1/predict", json={"goal": "g", "screenshots": [shot] * 3, "history": ["x"] * 2})
    assert over.status_code == 413
    assert "3000000 pixels in all" in over.json()["detail"]
    assert "2500000" in over.json()["detail"]
    huge = client.post("/v1/predict", json={"goal": "g", "screenshots": [b64_png(8000, 5001, "L")]})
    assert huge.status_code == 413
    assert "screenshot 0 has more than 40000000 pixels" in huge.json()["detail"]
    assert policy.calls == 1


def test_predict_decodes_screenshots_off_the_event_loop(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(max_predict_pixels=200_000_000)
    client = service.client(service.agent)
    shots = [b64_png(6000, 6600, "L")] * 4  # 158 Mpx in four one-colour PNGs of a few kB
    replies: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: replies.append(
            client.post("/v1/predict", json={"goal": "g", "screenshots": shots, "history": ["x"] * 3})
        )
    )
    t0 = time.perf_counter()
    request.start()
    slowest = max(_health_checks(service, request.is_alive), default=0.0)
    request.join()
    took = time.perf_counter() - t0
    assert replies[0].status_code == 200, replies[0].text
    # Decoded on the event loop, a health check arriving as decoding began would wait for all of it
    # (about the whole request); off the loop, none waits for a large part of it.
    assert slowest < took / 3, (slowest, took)


def test_takeover_points_must_lie_on_the_screen(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ScriptedPolicy(steps=1000, delay_s=0.1))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "needs a hand", "max_steps": 200}).json()["id"]
    wait_for_steps(client, task_id, 1)
    assert client.post(f"/v1/tasks/{task_id}/pause").status_code == 200
    serial = client.get(f"/v1/tasks/{task_id}").json()["device"]
    width, height = Image.open(io.BytesIO(client.get(f"/v1/devices/{serial}/screenshot").content)).size
    outside = [
        {"action": "click", "coordinate": [2**64, 2**64]},
        {"action": "click", "coordinate": [width, 0]},
        {"action": "long_press", "coordinate": [0, height], "time": 1},
        {"action": "swipe", "coordinate": [0, 0], "coordinate2": [10, height + 500]},
    ]
    for action in outside:
        reply = client.post(f"/v1/tasks/{task_id}/takeover", json={"action": action})
        assert reply.status_code == 422, (action, reply.text)
        assert f"outside the {width}x{height} screen" in reply.json()["detail"]
    assert client.get(f"/v1/tasks/{task_id}").json()["paused"]
    corner = {"action": "click", "coordinate": [width - 1, height - 1]}
    assert client.post(f"/v1/tasks/{task_id}/takeover", json={"action": corner}).status_code == 200
    human: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while not human and time.monotonic() < deadline:
        human = [
            s for s in client.get(f"/v1/trajectories/{task_id}").json()["steps"] if s["source"] == "human"
        ]
        time.sleep(0.05)
    client.post(f"/v1/tasks/{task_id}/cancel")
    assert [s["device_action"] for s in human] == [corner]


def test_model_names_are_resolved_before_the_policy_hears_of_them(make_service) -> None:  # type: ignore[no-untyped-def]
    policy = ScriptedPolicy(steps=1)
    service = make_service(policy)
    admin, agent = service.client(service.admin), service.client(service.agent)
    for path, body in (
        ("/v1/predict", predict(model="../../etc/passwd")),
        ("/v1/tasks", {"goal": "g", "model": "../../etc/passwd"}),
    ):
        reply = agent.post(path, json=body)
        assert reply.status_code == 422, reply.text
        assert "no model version or alias '../../etc/passwd'" in reply.json()["detail"]
    assert policy.asked == []
    # With an empty registry the policy's own model is the one name known.
    own = agent.post("/v1/predict", json=predict(model=policy.model_version))
    assert own.status_code == 200, own.text
    assert policy.asked == [policy.model_version]
    # A registered version goes to the policy server by its served name.
    assert admin.post("/v1/models", json={"name": "v1", "served_name": "ui-s1-7b"}).status_code == 201
    named = agent.post("/v1/predict", json=predict(model="v1"))
    assert named.status_code == 200, named.text
    assert named.json()["model_version"] == "v1"
    assert policy.asked[-1] == "ui-s1-7b"
    assert agent.post("/v1/predict", json=predict(model="ui-s1-7b")).status_code == 422
