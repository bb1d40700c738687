"""The ``Device`` interface every phone implements, and the errors it raises.

Small and async: the episode loop awaits a screenshot, then one action, and never asks which
implementation it holds (a phone over adb, an emulator, the simulated phone). Every method has a
deadline; a device that stops answering raises ``DeviceTimeout`` instead of hanging the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from PIL import Image


class DeviceError(RuntimeError):
    """Anything that went wrong talking to a device. ``serial`` names the device."""

    def __init__(self, serial: str, message: str) -> None:
        super().__init__(f"{serial}: {message}")
        self.serial = serial
        self.message = message


class DeviceGone(DeviceError):
    """The device is not connected (unplugged, offline, unauthorised, or never there)."""


class DeviceTimeout(DeviceError):
    """The device did not answer within the call's deadline."""


class BlackFrame(DeviceError):
    """The screenshot is all black: the screen is off or the app forbids capture (FLAG_SECURE)."""


class TextInputUnsupported(DeviceError):
    """The text cannot be typed on this device (non-ASCII with no Unicode-capable input method)."""


class AppNotFound(DeviceError):
    """No installed app matches the name."""


class Button(StrEnum):
    BACK = "Back"
    HOME = "Home"
    MENU = "Menu"
    ENTER = "Enter"


# Android key codes of the system buttons.
BUTTON_KEYCODES: dict[Button, int] = {Button.BACK: 4, Button.HOME: 3, Button.MENU: 82, Button.ENTER: 66}


@dataclass(frozen=True)
class ScreenCapture:
    """One screenshot as the device produced it: PNG bytes and the pixel size read from the PNG.

    ``black`` marks an all-black frame (screen off, or an app that forbids capture); ``note`` says
    which, when the driver could tell.
    """

    png: bytes
    width: int
    height: int
    black: bool = False
    note: str = ""
    # The decoded frame (RGB), when the driver already has it: saves decoding the PNG again.
    image: Image.Image | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DeviceInfo:
    serial: str
    model: str = ""
    manufacturer: str = ""
    android_version: str = ""
    sdk: int | None = None
    properties: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Device(Protocol):
    """A phone the agent can observe and act on. Coordinates are device pixels."""

    @property
    def serial(self) -> str: ...

    async def screenshot(self) -> ScreenCapture: ...

    async def tap(self, x: int, y: int) -> None: ...

    async def long_press(self, x: int, y: int, seconds: float = 1.0) -> None: ...

    async def swipe(self, x1: int, y1: int, x2: int, y2: int, seconds: float = 0.4) -> None: ...

    async def type_text(self, text: str) -> None: ...

    async def key(self, name: str) -> None:
        """An Android key by name: ``KEYCODE_ENTER``, ``ENTER`` or a numeric code."""
        ...

    async def press(self, button: Button) -> None: ...

    async def open_app(self, name: str) -> str:
        """Launch the app with this label (or package); return the package started."""
        ...

    async def wait(self, seconds: float) -> None: ...

    async def screen_size(self) -> tuple[int, int]:
        """Width and height in pixels as the screen is currently rotated."""
        ...

    async def rotation(self) -> int: ...

    async def hierarchy(self) -> str:
        """The uiautomator-style XML of the current screen."""
        ...

    async def foreground_app(self) -> str:
        """The package of the app in front."""
        ...

    async def info(self) -> DeviceInfo: ...
