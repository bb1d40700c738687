"""Retry rules of the vLLM client, at the HTTP transport level."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agent.policy import PolicyRejected, PolicyUnavailable
from agent.prompt import TextPart, Turn
from agent.vllm_policy import VllmPolicy, VllmSettings

TURNS = [Turn("user", (TextPart("hi"),))]
OK = {
    "model": "m",
    "choices": [{"message": {"content": '<think>t</think><action>{"action": "wait", "time": 1}</action>'}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 9},
}


def _policy(statuses: list[int], **kw) -> tuple[VllmPolicy, list[dict]]:  # type: ignore[no-untyped-def,type-arg]
    seen: list[dict] = []  # type: ignore[type-arg]

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        seen.append(json.loads(request.content))
        status = statuses.pop(0) if statuses else 200
        if status == 200:
            return httpx.Response(200, json=OK)
        return httpx.Response(status, json={"error": {"message": f"status {status}"}})

    settings = VllmSettings(base_url="http://policy", backoff_s=0.0, **kw)
    return VllmPolicy(settings, transport=httpx.MockTransport(handler)), seen


def test_5xx_and_429_are_retried_then_succeed() -> None:
    policy, seen = _policy([503, 429, 500], max_retries=3)
    retried: list[int] = []
    policy.on_retry = lambda: retried.append(1)  # the service counts these in its metrics
    result = asyncio.run(policy.predict(TURNS))
    assert len(seen) == 4
    assert len(retried) == 3
    assert result.parsed.ok
    assert result.prompt_tokens == 3
    assert result.model_version == "m"


def test_retries_are_bounded() -> None:
    policy, seen = _policy([503] * 10, max_retries=2)
    with pytest.raises(PolicyUnavailable, match="after 3 attempts"):
        asyncio.run(policy.predict(TURNS))
    assert len(seen) == 3


def test_4xx_is_not_retried() -> None:
    policy, seen = _policy([400], max_retries=5)
    with pytest.raises(PolicyRejected, match="status 400"):
        asyncio.run(policy.predict(TURNS))
    assert len(seen) == 1


def test_the_model_is_chosen_per_request_and_sampling_is_sent() -> None:
    policy, seen = _policy([], model="base")
    asyncio.run(policy.predict(TURNS))
    asyncio.run(policy.predict(TURNS, model="adapter-v7"))
    assert [s["model"] for s in seen] == ["base", "adapter-v7"]
    assert seen[0]["temperature"] == 0.0
    assert seen[0]["max_tokens"] == 512


def test_a_reply_that_is_not_a_completion_is_a_malformed_policy_error() -> None:
    from agent.policy import PolicyMalformed

    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, text="<html>Welcome to nginx</html>", headers={"content-type": "text/html"}
        )

    policy = VllmPolicy(VllmSettings(base_url="http://policy"), transport=httpx.MockTransport(html))
    with pytest.raises(PolicyMalformed, match="text/html, not a JSON completion"):
        asyncio.run(policy.predict(TURNS))


async def _hung_server() -> tuple[asyncio.Server, int]:
    """Accepts connections and never answers (a wedged server, a blackholing proxy)."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_hung_server_fails_a_prediction_within_its_deadline_and_readiness_within_seconds() -> None:
    import time

    async def scenario() -> tuple[float, float, bool]:
        server, port = await _hung_server()
        policy = VllmPolicy(
            VllmSettings(
                base_url=f"http://127.0.0.1:{port}",
                timeout_s=60,
                deadline_s=1.5,
                max_retries=3,
                backoff_s=0.1,
                health_timeout_s=0.5,
            )
        )
        start = time.monotonic()
        with pytest.raises(PolicyUnavailable, match=r"deadline.*no answer within 1\.5 s \(ReadTimeout\)"):
            await policy.predict(TURNS)
        failed_after = time.monotonic() - start
        start = time.monotonic()
        healthy = await policy.health()
        probed_in = time.monotonic() - start
        await policy.aclose()
        server.close()
        return failed_after, probed_in, healthy

    failed_after, probed_in, healthy = asyncio.run(scenario())
    assert failed_after < 3  # the deadline, not 4 attempts x 60 s
    assert not healthy
    assert probed_in < 2


def test_retry_after_is_honoured_and_back_off_is_jittered() -> None:
    import time

    from tenacity import RetryCallState

    from agent.retries import Retryable, retry_after, wait_retry_after

    times: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        times.append(time.monotonic())
        if len(times) == 1:
            return httpx.Response(503, headers={"Retry-After": "0.4"}, json={"error": "loading"})
        return httpx.Response(200, json=OK)

    # A jittered back-off of up to 60 s would miss the bound below: the server's 0.4 s is what counts.
    settings = VllmSettings(base_url="http://policy", backoff_s=60.0, max_retries=2, timeout_s=90)
    policy = VllmPolicy(settings, transport=httpx.MockTransport(handler))
    assert asyncio.run(policy.predict(TURNS)).parsed.ok
    assert 0.4 <= times[1] - times[0] < 2.0

    assert retry_after(httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert retry_after(httpx.Response(503, headers={"Retry-After": "soon"})) is None
    waits = set()
    for _ in range(20):  # without Retry-After: full jitter, so clients refused together spread out
        state = RetryCallState(None, None, (), {})
        state.attempt_number = 3
        state.set_exception((Retryable, Retryable("503"), None))
        waits.add(wait_retry_after(1.0, cap_s=8.0)(state))
    assert len(waits) > 10
    assert all(0 <= w <= 8.0 for w in waits)


def test_requests_take_the_connection_pools_in_turn() -> None:
    """httpx's pool does work quadratic in its connections per request, so the client spreads its
    requests over several pools: over a real socket, four pools keep four connections alive."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a pool reuses its connection

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            ports.append(self.client_address[1])
            body = json.dumps(OK).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    policy = VllmPolicy(VllmSettings(base_url=f"http://127.0.0.1:{server.server_port}", connection_pools=4))

    async def eight() -> None:
        try:
            for _ in range(8):
                await policy.predict(TURNS)
        finally:
            await policy.aclose()

    try:
        asyncio.run(eight())
    finally:
        server.shutdown()
    assert len(ports) == 8
    assert len(set(ports)) == 4  # one connection per pool, each used twice
    assert ports[:4] == ports[4:]  # in turn
