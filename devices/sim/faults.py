"""Faults a test can switch on in a simulated phone, to see the layers above cope.

Each flag mirrors something real phones do: a cable pulled (``gone``), adbd wedged (``offline``),
one command never returning (``hang``), a socket cut in the middle of a screenshot
(``drop_mid_stream``), a secure or switched-off screen (``black_frames``), a slow phone (``delay_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Faults:
    gone: bool = False  # the phone vanished: transport closed, new connections refused
    offline: bool = False  # connected but not answering: the server sees it as offline
    hang: set[str] = field(default_factory=set)  # shell commands (by first word) that never return
    drop_mid_stream: bool = False  # the next stream is cut after its first chunk
    black_frames: bool = False  # screencap returns an all-black frame
    delay_s: float = 0.0  # every service answers this much later
    display_warning: bool = False  # screencap prints a multi-display warning before the PNG

    def clear(self) -> None:
        self.gone = self.offline = self.drop_mid_stream = self.black_frames = self.display_warning = False
        self.hang = set()
        self.delay_s = 0.0
