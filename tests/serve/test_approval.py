"""Approval rules: typing into a password field, and a phone that cannot say what has the focus."""

from __future__ import annotations

import asyncio

from agent.actions import Type, Wait
from agent.trajectory import ImageSize, ScreenshotRef, Step
from devices.hierarchy import HierarchyError
from serve.tasks.takeover import Approval, Takeover


def test_typing_waits_for_a_person_when_the_phone_cannot_say_what_has_the_focus() -> None:
    rules = Approval(password_fields=True)
    typing = Type(text="secret")
    assert rules.reason(typing, focus="password") == "typing into a password field needs approval"
    assert rules.reason(typing, focus="other") is None
    assert rules.reason(Wait(time=1), focus=None) is None
    assert not Approval().checks_focus(typing)  # off unless asked for

    async def unreadable() -> str:
        raise HierarchyError("hierarchy dump does not parse: no element found")

    takeover = Takeover(rules, focus=unreadable)
    step = Step(
        index=0,
        screenshot=ScreenshotRef(uri="x.png", size=ImageSize(width=10, height=10)),
        device_action=typing,
    )
    reason = asyncio.run(takeover._reason(step))
    assert reason is not None
    assert reason.startswith("typing needs approval: cannot tell whether the focused field is a password")
