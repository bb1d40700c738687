"""What the simulated shell's programs share: their result, the server that keeps a stream open,
a usage error, and the signature every program has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devices.sim.phone import SimPhone


class KeepRunning(Exception):
    """The command is a server that runs until the client closes the stream (u2's app_process)."""

    def __init__(self, output: bytes, on_close: Callable[[], None]) -> None:
        super().__init__("keep running")
        self.output = output
        self.on_close = on_close


@dataclass
class Result:
    stdout: bytes = b""
    stderr: bytes = b""
    code: int = 0


class Usage(Exception):
    """A program was called wrongly: the shell prints the message, exit status 1."""


def int_arg(value: str) -> int:
    try:
        return round(float(value))
    except ValueError:
        raise Usage(f"not a number: {value!r}") from None


Command = Callable[["SimPhone", list[str], bytes, dict[str, str]], Result]
