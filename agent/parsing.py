"""Reading a UI-S1 response: ``<think>`` and ``<action>`` extraction, then strict JSON to an action.

The parser never raises. A model can say anything (a truncated generation, prose, a second
action, a megabyte of brackets), and the episode loop has to record it and carry on, so every
outcome is a ``ParsedResponse`` whose ``error`` says what was wrong.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from agent.actions import Action, ActionError, action_from_json

# A response longer than this is not something the policy produced on purpose (UI-S1 generates at
# most 512 tokens); refuse it before running regexes over it.
MAX_RESPONSE_CHARS = 200_000


class ParseErrorReason(StrEnum):
    NO_ACTION_TAG = "no_action_tag"
    BAD_JSON = "bad_json"
    UNKNOWN_ACTION = "unknown_action"
    BAD_ARGUMENT = "bad_argument"
    TOO_LONG = "too_long"


class ParseError(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: ParseErrorReason
    detail: str


class ParsedResponse(BaseModel):
    """What a raw response said. Exactly one of ``action`` and ``error`` is set."""

    model_config = ConfigDict(frozen=True)

    think: str | None = None
    action_text: str | None = None
    action: Action | None = None
    error: ParseError | None = None

    @property
    def ok(self) -> bool:
        return self.action is not None

    @property
    def format_ok(self) -> bool:
        """The paper's format term: a non-empty think block and a parseable action."""
        return self.ok and bool(self.think)


def parse_response(text: str) -> ParsedResponse:
    if len(text) > MAX_RESPONSE_CHARS:
        return _failed(ParseErrorReason.TOO_LONG, f"response has {len(text)} characters")
    think = first_tag(text, "think")
    action_text = first_tag(text, "action")
    if action_text is None:
        return _failed(ParseErrorReason.NO_ACTION_TAG, "no <action>...</action> block", think=think)
    try:
        action = action_from_json(action_text)
    except ActionError as exc:
        return _failed(ParseErrorReason(exc.reason), exc.detail, think=think, action_text=action_text)
    return ParsedResponse(think=think, action_text=action_text, action=action)


ACTION_END = "</action>"  # an answer is complete here: generation may stop at it


def first_tag(text: str, tag: str) -> str | None:
    """The stripped body of the first ``<tag>...</tag>``, as the regex ``<tag>(.*?)</tag>`` (DOTALL)
    finds it, but in linear time: if the first opening tag has no closing tag after it, no later
    one has either, so a response of a hundred thousand unclosed tags costs one scan, not a
    quadratic regex search."""
    start = text.find(f"<{tag}>")
    if start < 0:
        return None
    body = start + len(tag) + 2
    end = text.find(f"</{tag}>", body)
    if end < 0:
        return None
    return text[body:end].strip()


def format_response(action: Action, think: str = "") -> str:
    """The response text for ``action``: what the model is trained to write, and what a patch injects.

    An empty ``think`` gives the thought-free patch: an empty think block, not a missing one.
    """
    return f"<think>\n{think}\n</think>\n<action>\n{action.to_json()}\n</action>"


def _failed(
    reason: ParseErrorReason, detail: str, *, think: str | None = None, action_text: str | None = None
) -> ParsedResponse:
    # Details echo model output into logs and API responses: keep them short.
    if len(detail) > 500:
        detail = detail[:497] + "..."
    return ParsedResponse(
        think=think, action_text=action_text, error=ParseError(reason=reason, detail=detail)
    )
