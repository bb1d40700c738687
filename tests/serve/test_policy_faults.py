"""A broken policy server, as the service sees it: one that hangs, one that answers HTML."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent.vllm_policy import VllmSettings
from tests.serve.test_api import wait_finished

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def hung_port() -> Iterator[int]:
    """A server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


class _Html(BaseHTTPRequestHandler):
    def _page(self) -> None:
        body = b"<html><body>Welcome to nginx!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._page()

    def do_POST(self) -> None:
        self._page()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def html_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()


def test_a_hung_policy_server_fails_a_task_within_the_deadline_and_readiness_answers_fast(
    make_service: Any, hung_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    policy = VllmSettings(base_url=f"http://127.0.0.1:{hung_port}", deadline_s=3, timeout_s=60, max_retries=3)
    with caplog.at_level("WARNING", logger="serve.api.app"):
        service = make_service(own_policy=True, policy=policy)
    assert (
        f"the policy server at http://127.0.0.1:{hung_port} does not answer" in caplog.text
    )  # said at start
    client = service.client(service.agent)
    start = time.monotonic()
    ready = service.client().get("/readyz")
    assert time.monotonic() - start < policy.timeout_s / 4  # a bounded probe, not the 60 s read timeout
    assert ready.status_code == 503
    assert ready.json()["checks"]["policy"] is False
    start = time.monotonic()
    task = wait_finished(client, client.post("/v1/tasks", json={"goal": "Turn on Wi-Fi"}).json()["id"])
    assert time.monotonic() - start < 20  # the 3 s deadline (not 4 x 60 s and back-off)
    assert task["status"] == "error"
    assert "deadline" in task["error"]


def test_a_policy_server_answering_html_is_a_policy_error_with_its_cause(
    make_service: Any, html_port: int
) -> None:
    service = make_service(own_policy=True, policy=VllmSettings(base_url=f"http://127.0.0.1:{html_port}"))
    client = service.client(service.agent)
    task = wait_finished(client, client.post("/v1/tasks", json={"goal": "Turn on Wi-Fi"}).json()["id"])
    assert task["status"] == "error"
    assert "not a JSON completion" in task["error"]
    predicted = client.post("/v1/predict", json={"goal": "Turn on Wi-Fi", "screenshots": [_png()]})
    assert predicted.status_code == 502
    assert "not a JSON completion" in predicted.json()["detail"]


def _png() -> str:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (108, 240), "white").save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()
