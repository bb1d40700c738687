"""Takeover: a client holds a running episode before its next action and may supply that action.

The episode loop calls ``review`` with each step the policy proposes; while paused, it waits
there until the client resumes, with a replacement action (recorded as a human step) or without
one (the policy's action goes ahead).

Approval: a task's ``Approval`` rules name the actions a person must see first (``answer`` or
``terminate``, typing, typing into a password field, opening named apps, or every step). A step
that matches holds the task by itself, with the reason; the person approves it (resume),
replaces it (takeover) or cancels the task, and the decision is recorded with the step
(``extra["review"]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.actions import Action, Click, LongPress, Open, Swipe, Type
from agent.episode import Review, Verdict
from agent.trajectory import Episode, ImageSize, Step

ActionName = Literal[
    "click", "long_press", "swipe", "type", "system_button", "open", "wait", "answer", "terminate", "key"
]


class Approval(BaseModel):
    """Which proposed actions wait for a person's approval before they reach the phone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    actions: list[ActionName] = Field(
        default_factory=list, max_length=16, description="Action kinds that need approval, e.g. type, answer"
    )
    apps: list[str] = Field(
        default_factory=list, max_length=64, description="Opening these apps (by name) needs approval"
    )
    password_fields: bool = Field(
        False, description="Typing while a password field has the focus needs approval (read from the phone)"
    )
    every_step: bool = Field(False, description="Every action needs approval")

    def checks_focus(self, action: Action | None) -> bool:
        """Whether deciding on ``action`` needs to know if the focused field is a password."""
        return self.password_fields and isinstance(action, Type)

    def reason(self, action: Action | None, *, focus: str | None = None) -> str | None:
        """Why ``action`` needs a person first, or None when it does not. ``focus`` is what the
        phone said of the focused field when ``checks_focus``: "password", "other", or why it
        could not tell (then typing waits for a person, as it would into a password field)."""
        if action is None:
            return None
        kind = action.to_dict()["action"]
        if self.every_step:
            return f"every step needs approval ({kind})"
        if kind in self.actions:
            return f"{kind} needs approval"
        if isinstance(action, Open) and action.text.strip().lower() in {a.strip().lower() for a in self.apps}:
            return f"opening {action.text} needs approval"
        if self.checks_focus(action) and focus == "password":
            return "typing into a password field needs approval"
        if self.checks_focus(action) and focus not in (None, "other"):
            return f"typing needs approval: cannot tell whether the focused field is a password ({focus})"
        return None


class Takeover:
    """Lets a client pause a running episode before its next action and supply that action."""

    def __init__(
        self,
        approval: Approval | None = None,
        on_hold: Callable[[Step, str], Awaitable[None]] | None = None,
        focus: Callable[[], Awaitable[str]] | None = None,
        on_held: Callable[[Step, str | None], Awaitable[None]] | None = None,
    ) -> None:
        self.approval = approval
        self.on_hold = on_hold  # told when a step holds the task for approval
        self.on_held = on_held  # told when any step starts waiting for the client (and why, if a rule)
        self.focus = focus  # asks the phone about its focused field (see ``Approval.reason``)
        self.reason: str | None = None  # why the held step waits, when a rule (not a person) held it
        self._resume = asyncio.Event()
        self._resume.set()
        self._replacement: Action | None = None
        self._hold = False  # hold the step after the one that goes on next
        self.waiting = asyncio.Event()  # set while a step waits for the client
        self.held: Step | None = None  # the step waiting for the client, with the policy's proposal
        self.screen: ImageSize | None = None  # device pixels of the last screen a step showed

    @property
    def paused(self) -> bool:
        """Held, or about to hold again after the step that was let go on."""
        return not self._resume.is_set() or self._hold

    def pause(self) -> None:
        self._resume.clear()

    def resume(self, action: Action | None = None, *, hold: bool = False) -> None:
        """Let the held step go on (with ``action`` in place of the policy's, when given); with
        ``hold``, the step after it is held again, so that a person can drive step by step."""
        self._replacement = action
        self._hold = hold
        self._resume.set()

    async def review(self, episode: Episode, step: Step) -> Review:
        self.screen = step.screenshot.size
        reason = await self._reason(step)
        if reason is not None and self._resume.is_set():
            self.pause()
            if self.on_hold is not None:
                await self.on_hold(step, reason)
        self.reason = reason
        if not self._resume.is_set():
            self.held = step
            self.waiting.set()
            if self.on_held is not None:
                await self.on_held(step, reason)
            try:
                await self._resume.wait()
            finally:
                self.waiting.clear()
                self.held = None
        action, self._replacement = self._replacement, None
        if self._hold:  # this step goes on; the next one waits for the client again
            self._hold = False
            self._resume.clear()
        self.reason = None
        note = (
            {"approval": reason, "decision": "replaced" if action is not None else "approved"}
            if reason
            else None
        )
        if action is not None:
            return Review(Verdict.REPLACE, action, note)
        return Review(note=note)

    async def _reason(self, step: Step) -> str | None:
        if self.approval is None:
            return None
        focus = None
        if self.approval.checks_focus(step.device_action) and "focus" in step.extra:
            focus = str(step.extra["focus"])  # the episode loop asked the phone already: one answer
        elif self.approval.checks_focus(step.device_action):
            focus = "no way to ask the phone"
            if self.focus is not None:
                try:
                    focus = await self.focus()
                except Exception as exc:  # the phone's answer decides nothing: a person does
                    focus = f"{type(exc).__name__}: {exc}"[:200]
        return self.approval.reason(step.device_action, focus=focus)


def off_screen(action: Action, screen: ImageSize) -> str | None:
    """Why a device-pixel action does not fit on the screen, or None when it does."""
    points = {"coordinate": action.coordinate} if isinstance(action, Click | LongPress | Swipe) else {}
    if isinstance(action, Swipe):
        points["coordinate2"] = action.coordinate2
    for name, (x, y) in points.items():
        if x >= screen.width or y >= screen.height:
            return f"{name} ({x}, {y}) is outside the {screen.width}x{screen.height} screen"
    return None
