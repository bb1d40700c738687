"""The ``Policy`` interface: a conversation in, one ``PolicyResult`` out.

Two backends implement it: ``agent.vllm_policy.VllmPolicy`` (a vLLM server over its
OpenAI-compatible API, the production path) and ``agent.local_policy.LocalPolicy`` (transformers
in-process, for development, CPU-only hosts and the trainer). Code above this interface never
asks which one it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent.parsing import ParsedResponse, parse_response
from agent.prompt import Turn


class SamplingSettings(BaseModel):
    """Decoding settings. Greedy by default (evaluation and serving); training samples at 1.0."""

    model_config = ConfigDict(frozen=True)

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="Sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass")
    max_tokens: int = Field(512, gt=0, le=8192, description="Response token limit (UI-S1 needs at most 512)")
    seed: int | None = Field(None, ge=-(2**63), lt=2**63, description="Sampling seed (a 64-bit integer)")
    logprobs: bool = Field(False, description="Ask for token log-probabilities")


class PolicyResult(BaseModel):
    """What the policy said for one step, with the bookkeeping the trajectory needs."""

    model_config = ConfigDict(frozen=True)

    raw: str
    parsed: ParsedResponse
    model_version: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    logprobs: list[float] | None = None  # one per generated token, when asked for

    @classmethod
    def from_text(cls, raw: str, **fields: object) -> PolicyResult:
        return cls(raw=raw, parsed=parse_response(raw), **fields)


class PolicyError(RuntimeError):
    """The policy could not answer. ``retryable`` tells whether trying again may help."""

    retryable = False


class PolicyUnavailable(PolicyError):
    """The policy server is down, unreachable, overloaded or timed out (after retries)."""

    retryable = True


class PolicyRejected(PolicyError):
    """The server refused the request (a 4xx: unknown model, prompt too long, too many images)."""


class PolicyMalformed(PolicyError):
    """The server answered, but not with a completion (an HTML error page, a proxy's reply, JSON
    without choices): something other than the policy server is at its address, or it is broken."""


@runtime_checkable
class Policy(Protocol):
    @property
    def model_version(self) -> str:
        """The version that answers when no ``model`` is given."""
        ...

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        """Answer the last user turn. ``model`` picks a served model or adapter by name."""
        ...

    async def aclose(self) -> None: ...
