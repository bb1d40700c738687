"""An optional judge model: labels finished episodes that nobody labelled, through any
OpenAI-compatible endpoint (a vLLM server, a hosted model). Off by default.

The judge sees the goal, the actions taken (as the policy wrote them) and the last screenshots,
and must answer with a line ``VERDICT: SUCCESS`` or ``VERDICT: FAILURE``. Anything else leaves the
episode unlabelled. A verdict is stored on the episode with the judge's model name and the prompt
version (labels ``judge``, ``judge_prompt_version``, ``judge_verdict``, ``label_source: judge``),
so curation can trust or ignore it (``curation.trust_judge``) and a later prompt can be told apart.

    uis1 retrain --config retrain.yaml      # with judge: {enabled: true, base_url: ..., model: ...}
"""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from agent.retries import Retryable, check, wait_retry_after
from agent.store import EpisodeQuery, TrajectoryStore
from agent.trajectory import Episode

log = logging.getLogger(__name__)

PROMPT_VERSION = "1"
SYSTEM = (
    "You check whether a phone agent completed a task. You are shown the task, the actions the agent "
    "took, and the last screenshots. Answer with one short reason, then a final line that is exactly "
    "VERDICT: SUCCESS or VERDICT: FAILURE."
)
VERDICT = re.compile(r"VERDICT:\s*(SUCCESS|FAILURE)\b", re.IGNORECASE)


class JudgeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    base_url: str = "http://127.0.0.1:8000"
    model: str = "judge"
    api_key: str | None = None
    screenshots: int = Field(2, ge=1, le=8)  # the last N screenshots of the episode
    max_tokens: int = Field(256, gt=0)
    timeout_s: float = Field(120.0, gt=0)
    max_episodes: int = Field(500, gt=0)  # per run
    max_retries: int = Field(3, ge=0)  # per episode, on connection errors, 408, 429 and 5xx
    backoff_s: float = Field(1.0, ge=0)  # first retry delay (grows, with jitter, up to 30 s)


def parse_verdict(text: str) -> bool | None:
    """True / False for a clear verdict (the last one given), None otherwise."""
    found = VERDICT.findall(text)
    return None if not found else found[-1].upper() == "SUCCESS"


def judge_messages(episode: Episode, store: TrajectoryStore, settings: JudgeSettings) -> list[dict[str, Any]]:
    actions = [
        f"{s.index + 1}. {s.device_action.to_json() if s.device_action else '(no action)'}"
        for s in episode.steps
    ]
    content: list[dict[str, Any]] = [
        {
            "type": "text",
            "text": f"Task: {episode.goal}\nActions:\n"
            + "\n".join(actions)
            + (f"\nThe agent's answer: {episode.answer}" if episode.answer else ""),
        }
    ]
    for step in episode.steps[-settings.screenshots :]:
        try:
            png = store.screenshots.get(step.screenshot)
        except OSError:
            continue
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        content.append({"type": "image_url", "image_url": {"url": url}})
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]


def judge_episodes(
    store: TrajectoryStore, settings: JudgeSettings, *, client: httpx.Client | None = None
) -> dict[str, int]:
    """Ask the judge about finished, unlabelled episodes; returns counts by outcome."""
    counts = {"success": 0, "failure": 0, "unclear": 0, "error": 0}
    if not settings.enabled:
        return counts
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    http = client or httpx.Client(
        base_url=settings.base_url.rstrip("/"), headers=headers, timeout=settings.timeout_s
    )
    try:
        offset, seen = 0, 0
        while seen < settings.max_episodes:
            page = store.query(EpisodeQuery(limit=100, offset=offset, oldest_first=True))
            if not page:
                break
            offset += len(page)
            for episode in page:
                if not episode.status.finished or episode.is_successful is not None or not episode.steps:
                    continue
                seen += 1
                counts[_judge_one(store, episode, settings, http)] += 1
                if seen >= settings.max_episodes:
                    break
    finally:
        if client is None:
            http.close()
    log.info("judge %s: %s", settings.model, counts)
    return counts


def _ask(http: httpx.Client, body: dict[str, Any]) -> str:
    try:
        response = http.post("/v1/chat/completions", json=body)
    except httpx.TransportError as exc:  # connection refused or reset, timeouts
        raise Retryable(f"{type(exc).__name__}: {exc}") from None
    check(response, response.text[:200])
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"].get("content") or "")


def _log_retry(state: RetryCallState) -> None:
    problem = state.outcome.exception() if state.outcome is not None else None
    delay = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning("judge request failed (%s); retrying in %.1fs", problem, delay)


def _judge_one(store: TrajectoryStore, episode: Episode, settings: JudgeSettings, http: httpx.Client) -> str:
    body = {
        "model": settings.model,
        "messages": judge_messages(episode, store, settings),
        "temperature": 0.0,
        "max_tokens": settings.max_tokens,
    }
    retrying = Retrying(
        stop=stop_after_attempt(settings.max_retries + 1),
        wait=wait_retry_after(settings.backoff_s, cap_s=30.0),
        retry=retry_if_exception_type(Retryable),
        before_sleep=_log_retry,
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                text = _ask(http, body)
    except (Retryable, httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        log.warning("judge request for %s failed: %s", episode.id, exc)
        return "error"
    verdict = parse_verdict(text)
    if verdict is None:
        return "unclear"
    labels = {
        **episode.labels,
        "judge": settings.model,
        "judge_prompt_version": PROMPT_VERSION,
        "judge_verdict": "success" if verdict else "failure",
        "label_source": "judge",
    }
    store.save_episode(episode.model_copy(update={"labels": labels, "is_successful": verdict}))
    return "success" if verdict else "failure"
