"""``VllmPolicy``: the policy served by vLLM, over its OpenAI-compatible chat completions API.

Images travel inline as base64 data URLs, already smart-resized by the prompt builder, so the
server sees exactly the size the coordinates refer to. Connection errors, timeouts, 429 and 5xx
are retried (``agent.retries``: the server's Retry-After, else jittered exponential back-off), a
bounded number of times and all within one
deadline per prediction (``deadline_s``, default 1.5 x ``timeout_s``): a server that accepts and
never answers fails a step within the deadline, not after retries x ``timeout_s``. Any other 4xx
is the request's fault and is not retried; a 200 that is not a completion is ``PolicyMalformed``.
The served model (base or LoRA adapter) is chosen per request, which is how a hot swap or a
rollback moves traffic without touching the client.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
)

from agent.geometry import ResizeSettings, Size, image_tokens
from agent.parsing import ACTION_END
from agent.policy import PolicyMalformed, PolicyRejected, PolicyResult, PolicyUnavailable, SamplingSettings
from agent.prompt import PromptSettings, Turn, image_data_url, to_openai_messages
from agent.retries import Retryable, check, wait_retry_after

log = logging.getLogger(__name__)


class VllmSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    base_url: str = Field("http://127.0.0.1:8000", description="The vLLM server (OpenAI-compatible API)")
    model: str = Field("ui-s1-7b", description="Served model name (or an adapter's name)")
    api_key: str | None = Field(None, description="vLLM's --api-key, when it has one")
    timeout_s: float = Field(60.0, gt=0, description="Per-request read timeout (one generation)")
    connect_timeout_s: float = Field(3.0, gt=0, description="Connection timeout")
    deadline_s: float | None = Field(
        None, gt=0, description="Total time for one prediction, retries included (unset: 1.5 x timeout_s)"
    )
    health_timeout_s: float = Field(2.0, gt=0, description="Timeout of the readiness probe")
    max_retries: int = Field(3, ge=0, description="Retries on connection errors, 429 and 5xx")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay (doubles each retry)")
    max_connections: int = Field(256, gt=0, description="Connection pool size (concurrent policy requests)")
    connection_pools: int = Field(
        8,
        ge=1,
        description="Pools the connections are split over: httpx's pool does work quadratic in its "
        "connections for each request, which at 128 requests in flight took most of a core",
    )
    suppress_token_ids: tuple[int, ...] = Field(
        (), description="Token ids never to generate (JSON list; e.g. vision tokens)"
    )


class VllmPolicy:
    def __init__(
        self,
        settings: VllmSettings | None = None,
        *,
        prompt: PromptSettings | None = None,
        sampling: SamplingSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings or VllmSettings()
        self.prompt = prompt or PromptSettings()
        self.sampling = sampling or SamplingSettings()
        self.on_retry = on_retry  # told of each retry (the service counts them in its metrics)
        headers = {"Authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        # Requests take the pools in turn (encode/httpcore#1035: each request's pass over its pool
        # costs time in the square of the pool's connections; eight pools cut it about eightfold).
        pools = (
            1 if transport is not None else min(self.settings.connection_pools, self.settings.max_connections)
        )
        self._clients = [
            httpx.AsyncClient(
                base_url=self.settings.base_url.rstrip("/"),
                headers=headers,
                verify=_tls(),
                timeout=httpx.Timeout(self.settings.timeout_s, connect=self.settings.connect_timeout_s),
                limits=httpx.Limits(max_connections=-(-self.settings.max_connections // pools)),
                transport=transport,
            )
            for _ in range(pools)
        ]
        self._client = self._clients[0]  # for the occasional request: health, models, the image probe
        self._turn = itertools.count()

    @property
    def model_version(self) -> str:
        return self.settings.model

    def _body(self, turns: Sequence[Turn], sampling: SamplingSettings, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": to_openai_messages(turns, self.prompt),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "n": 1,
            # An answer is complete once its action is: nothing after it is read (vLLM's options).
            "stop": [ACTION_END],
            "include_stop_str_in_output": True,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.logprobs:
            body["logprobs"] = True
        if self.settings.suppress_token_ids:
            body["logit_bias"] = {str(t): -100 for t in self.settings.suppress_token_ids}
        return body

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        s = sampling or self.sampling
        name = model or self.settings.model
        # Encoding the screenshots is CPU work: off the event loop, which serves other episodes.
        body = await asyncio.to_thread(self._body, turns, s, name)
        start = time.perf_counter()
        data = await self._post("/v1/chat/completions", body)
        latency = time.perf_counter() - start
        try:
            choice = data["choices"][0]
            raw = choice["message"]["content"] or ""
            usage: Mapping[str, Any] = data.get("usage") or {}
        except (KeyError, IndexError, TypeError) as exc:
            raise PolicyMalformed(f"malformed completion from {self.settings.base_url}: {exc!r}") from None
        logprobs = None
        content = (choice.get("logprobs") or {}).get("content") if s.logprobs else None
        if content:
            logprobs = [float(item["logprob"]) for item in content]
        return PolicyResult.from_text(
            raw,
            model_version=str(data.get("model") or name),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            latency_s=latency,
            logprobs=logprobs,
        )

    async def score(self, turns: Sequence[Turn], count: int, *, model: str | None = None) -> list[float]:
        """Log-probabilities of the last ``count`` tokens of a conversation that ends with an
        assistant turn, as the engine computes them (vLLM's ``prompt_logprobs`` with the final
        message continued): what ``agent.fingerprint`` compares."""
        body = {
            "model": model or self.settings.model,
            "messages": await asyncio.to_thread(to_openai_messages, turns, self.prompt),
            "add_generation_prompt": False,
            "continue_final_message": True,
            "prompt_logprobs": 0,
            "return_token_ids": True,
            "max_tokens": 1,
            "temperature": 0.0,
        }
        data = await self._post("/v1/chat/completions", body)
        try:
            tail = data["prompt_logprobs"][-count:]
            ids = data.get("prompt_token_ids") or []
            values = []
            for i, entry in enumerate(tail):
                # One entry per prompt token: {token id: {"logprob": ...}}, the prompt's own token
                # among them (with prompt_logprobs 0, the only one).
                token = str(ids[len(ids) - count + i]) if ids else next(iter(entry))
                values.append(float(entry[token]["logprob"]))
        except (KeyError, IndexError, TypeError, ValueError, StopIteration) as exc:
            raise PolicyMalformed(
                f"no prompt log-probabilities from {self.settings.base_url}: {exc!r}"
            ) from None
        if len(values) != count:
            raise PolicyMalformed(
                f"{len(values)} prompt log-probabilities from {self.settings.base_url}, {count} asked"
            )
        return values

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries inside the deadline; each attempt's timeout is what the deadline leaves."""
        s = self.settings
        budget = s.deadline_s if s.deadline_s is not None else 1.5 * s.timeout_s
        deadline = time.monotonic() + budget
        retrying = AsyncRetrying(
            stop=stop_after_attempt(s.max_retries + 1) | stop_after_delay(budget),
            wait=wait_retry_after(s.backoff_s, cap_s=max(s.backoff_s, 8.0)),
            retry=retry_if_exception_type(Retryable),
            before_sleep=self._retrying,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Retryable("the deadline passed")
                    timeout = httpx.Timeout(min(s.timeout_s, left), connect=min(s.connect_timeout_s, left))
                    return await self._attempt(path, body, timeout)
        except Retryable as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            tries = f"{attempts} attempt" + ("s" if attempts != 1 else "")
            raise PolicyUnavailable(
                f"policy server {s.base_url} failed after {tries} within its {budget:g} s deadline ({exc})"
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _retrying(self, state: RetryCallState) -> None:
        _log_retry(state)
        if self.on_retry is not None:
            self.on_retry()

    async def _attempt(self, path: str, body: dict[str, Any], timeout: httpx.Timeout) -> dict[str, Any]:
        client = self._clients[next(self._turn) % len(self._clients)]
        try:
            response = await client.post(path, json=body, timeout=timeout)
        except httpx.TimeoutException as exc:  # its message is often empty: say what timed out
            raise Retryable(_timed_out(exc, timeout)) from None
        except httpx.TransportError as exc:
            raise Retryable(f"{type(exc).__name__}: {exc or 'no detail'}") from None
        if response.status_code >= 400:
            detail = _error_message(response)
            check(response, detail)
            raise PolicyRejected(f"{response.status_code} from the policy server: {detail}")
        try:
            data = response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise PolicyMalformed(
                f"the policy server at {self.settings.base_url} answered {response.status_code} with {kind}, "
                "not a JSON completion: is something else at that address?"
            ) from None
        if not isinstance(data, dict):
            raise PolicyMalformed(
                f"the policy server answered a JSON {type(data).__name__}, not a completion"
            )
        return data

    async def health(self) -> bool:
        try:
            response = await self._client.get("/health", timeout=self.settings.health_timeout_s)
        except (httpx.TransportError, httpx.TimeoutException):
            return False
        return response.status_code == 200

    async def image_sizing_mismatch(self, resize: ResizeSettings, timeout_s: float = 30.0) -> str | None:
        """Why the server's image processor would not resize screenshots as ``resize`` does, or
        None when it does: then a captured PNG can go to it as is (``image_transport=original``)
        and the model sees exactly the image the action's coordinates refer to. A server that
        cannot be asked raises ``PolicyUnavailable``.

        Two one-token requests, a 1080x2400 screen (held by ``max_pixels``) and a 28x28 one
        (raised by ``min_pixels``): the difference of their prompt tokens must be the difference
        of the image tokens ``resize`` gives them (a template's own tokens cancel out).
        """
        probes = (Size(1080, 2400), Size(28, 28))
        counts = []
        for size in probes:
            url = image_data_url(Image.new("RGB", (size.width, size.height), "white"))
            content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "?"}]
            body = {
                "model": self.settings.model,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": 1,
                "temperature": 0.0,
            }
            try:
                response = await self._client.post("/v1/chat/completions", json=body, timeout=timeout_s)
                response.raise_for_status()
                counts.append(int(response.json()["usage"]["prompt_tokens"]))
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                raise PolicyUnavailable(
                    f"could not check the image processing of {self.settings.base_url} ({type(exc).__name__}: {exc})"
                ) from None
        expected = [image_tokens(size, resize) for size in probes]
        if counts[0] - counts[1] == expected[0] - expected[1]:
            return None
        return (
            f"the policy server turns a 1080x2400 screen into {counts[0] - counts[1] + expected[1]} image "
            f"tokens where the service's resize settings give {expected[0]}: its processor's min/max "
            "pixels differ from UIS1_RESIZE__*"
        )

    async def served_models(self) -> list[str]:
        response = await self._client.get("/v1/models")
        response.raise_for_status()
        return [m["id"] for m in response.json().get("data", [])]

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client and pool of the process: making one takes ~20 ms."""
    return httpx.create_ssl_context()


def _log_retry(state: RetryCallState) -> None:
    problem = state.outcome.exception() if state.outcome is not None else None
    delay = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning("policy request failed (%s); retrying in %.1fs", problem, delay)


def _error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    return str(data.get("message", data) if isinstance(data, dict) else data)[:300]


def _timed_out(exc: httpx.TimeoutException, timeout: httpx.Timeout) -> str:
    """What a timeout means, in words: httpx's own messages are often empty."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"could not connect within {timeout.connect:.1f} s (ConnectTimeout)"
    if isinstance(exc, httpx.ReadTimeout):
        return f"no answer within {timeout.read:.1f} s (ReadTimeout)"
    if isinstance(exc, httpx.WriteTimeout):
        return f"could not send the request within {timeout.write:.1f} s (WriteTimeout)"
    return f"{type(exc).__name__}: {exc or 'no connection free in time'}"
