"""Retries of requests to OpenAI-compatible servers (the policy, the retraining job's judge).

Which failures deserve another attempt (connection errors, timeouts, 408, 429 and 5xx), and how
long to wait before it: what the server asked for in ``Retry-After`` when it says, else
exponential back-off with full jitter, so that many clients refused at once do not come back at
once. tenacity does the retrying; this module only says what to retry and how long to wait.
"""

from __future__ import annotations

import email.utils
import time

import httpx
from tenacity import RetryCallState
from tenacity.wait import wait_base, wait_random_exponential

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class Retryable(Exception):
    """An attempt failed in a way another attempt may not; ``retry_after_s``: the server's wish."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def retry_after(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` in seconds (a number or an HTTP date), None when absent or bad."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def check(response: httpx.Response, describe: str) -> None:
    """Raise ``Retryable`` for a status worth another attempt (with the server's Retry-After)."""
    if response.status_code in RETRYABLE_STATUS:
        raise Retryable(f"{response.status_code}: {describe}", retry_after(response))


class wait_retry_after(wait_base):  # noqa: N801 (tenacity's naming)
    """The server's Retry-After (at most ``cap_s``), else exponential back-off with full jitter."""

    def __init__(self, backoff_s: float, cap_s: float) -> None:
        self.cap_s = cap_s
        self.backoff = wait_random_exponential(multiplier=backoff_s, max=cap_s)

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        problem = outcome.exception() if outcome is not None and outcome.failed else None
        if isinstance(problem, Retryable) and problem.retry_after_s is not None:
            return min(problem.retry_after_s, self.cap_s)
        return float(self.backoff(retry_state))
