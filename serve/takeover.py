"""Takeover: a client holds a running episode before its next action and may supply that action.

The episode loop calls ``review`` with each step the policy proposes; while paused, it waits
there until the client resumes, with a replacement action (recorded as a human step) or without
one (the policy's action goes ahead).
"""

from __future__ import annotations

import asyncio

from agent.actions import Action, Click, LongPress, Swipe
from agent.episode import Review, Verdict
from agent.trajectory import Episode, ImageSize, Step


class Takeover:
    """Lets a client pause a running episode before its next action and supply that action."""

    def __init__(self) -> None:
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
        if not self._resume.is_set():
            self.held = step
            self.waiting.set()
            try:
                await self._resume.wait()
            finally:
                self.waiting.clear()
                self.held = None
        action, self._replacement = self._replacement, None
        if self._hold:  # this step goes on; the next one waits for the client again
            self._hold = False
            self._resume.clear()
        return Review(Verdict.REPLACE, action) if action is not None else Review()


def off_screen(action: Action, screen: ImageSize) -> str | None:
    """Why a device-pixel action does not fit on the screen, or None when it does."""
    points = {"coordinate": action.coordinate} if isinstance(action, Click | LongPress | Swipe) else {}
    if isinstance(action, Swipe):
        points["coordinate2"] = action.coordinate2
    for name, (x, y) in points.items():
        if x >= screen.width or y >= screen.height:
            return f"{name} ({x}, {y}) is outside the {screen.width}x{screen.height} screen"
    return None
