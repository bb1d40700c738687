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
        self.waiting = asyncio.Event()  # set while a step waits for the client
        self.screen: ImageSize | None = None  # device pixels of the last screen a step showed

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def pause(self) -> None:
        self._resume.clear()

    def resume(self, action: Action | None = None) -> None:
        self._replacement = action
        self._resume.set()

    async def review(self, episode: Episode, step: Step) -> Review:
        self.screen = step.screenshot.size
        if not self._resume.is_set():
            self.waiting.set()
            await self._resume.wait()
            self.waiting.clear()
        action, self._replacement = self._replacement, None
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
