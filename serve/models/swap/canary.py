"""The canary every swap sends before the ``default`` alias moves: one fixed, realistic request
(the simulated phone's home screen and a simple goal), greedy, to the new version; its answer must
parse as an action, or the version is not served."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent import fingerprint
from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import PromptSettings, build_conversation
from agent.registry import ModelVersion

screen = fingerprint.screen  # the simulated phone's home screen, drawn once per process


def turns(goal: str, prompt: PromptSettings) -> list[Any]:
    """The canary's request, with ``prompt`` (the version's own system prompt)."""
    return build_conversation(goal, [screen()], [], prompt)


async def check(
    version: ModelVersion,
    ask: Callable[[list[Any], SamplingSettings], Awaitable[PolicyResult]],
    goal: str,
    max_tokens: int,
    prompt: PromptSettings,
) -> dict[str, Any]:
    """Send the canary through ``ask``; the record says whether it passed (``ok``), and if not,
    ``why``, with the answer, its action and the seconds it took."""
    start = time.perf_counter()
    try:
        result = await ask(turns(goal, prompt), SamplingSettings(temperature=0.0, max_tokens=max_tokens))
    except Exception as exc:
        return {
            "ok": False,
            "seconds": round(time.perf_counter() - start, 3),
            "why": f"the canary request to {version.name} failed: {exc}",
        }
    record: dict[str, Any] = {
        "ok": result.parsed.action is not None,
        "seconds": round(time.perf_counter() - start, 3),
        "raw": result.raw[:500],
    }
    if result.parsed.action is None:
        reason = result.parsed.error.reason.value if result.parsed.error else "no action"
        record["why"] = f"the canary answer of {version.name} does not parse ({reason}): {result.raw[:200]!r}"
    else:
        record["action"] = result.parsed.action.to_dict()
    return record
