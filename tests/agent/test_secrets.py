"""Masking what a step typed (agent.secrets): long secrets wherever the step quotes them, short ones
by dropping the texts they would garble."""

from __future__ import annotations

from agent.actions import Type
from agent.parsing import parse_response
from agent.secrets import MASK, redact
from agent.trajectory import ImageSize, ScreenshotRef, Step


def _step(raw: str, text: str) -> Step:
    return Step(
        index=0,
        screenshot=ScreenshotRef(uri="x.png", size=ImageSize(width=10, height=10)),
        raw_response=raw,
        action=Type(text=text),
        device_action=Type(text=text),
        thought=raw,
    )


def test_a_long_secret_is_masked_where_quoted_and_escaped() -> None:
    secret = 'pa"ss\\wörd'
    raw = '<think>\ntype pa"ss\\wörd\n</think>\n<action>\n{"action": "type", "text": "pa\\"ss\\\\w\\u00f6rd"}\n</action>'
    masked = redact(_step(raw, secret), secret, focus="password")
    assert masked.raw_response is not None
    assert "ss" not in masked.raw_response.replace("secret", "")
    assert masked.device_action == Type(text=MASK)
    assert masked.extra["secret"] == {"length": len(secret), "focus": "password"}


def test_a_short_secret_drops_the_texts_instead_of_garbling_them() -> None:
    raw = '<think>\nthe PIN is e\n</think>\n<action>\n{"action": "type", "text": "e"}\n</action>'
    masked = redact(_step(raw, "e"), "e", focus="password")  # substring masking would break "type"
    assert masked.raw_response is not None
    assert "PIN" not in masked.raw_response
    assert parse_response(masked.raw_response).action == Type(text=MASK)  # still an answer that parses
    assert masked.thought is None
