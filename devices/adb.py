"""``AdbDriver``: a real phone or emulator through an adb server, with adbutils.

Every call has an explicit deadline (adbutils' own default is ten minutes), runs the blocking
adbutils call in a worker thread, and maps adbutils' errors onto ``devices.base`` errors: a
device that vanished raises ``DeviceGone``, one that stopped answering ``DeviceTimeout``.

Command lines are always built from literal arguments (``devices.text.quote``): text from a model
or a client reaches the phone as data. Unicode text goes through the ADBKeyBoard broadcast when
that input method is installed (the user's input method is restored afterwards), else through
uiautomator2's clipboard input when uiautomator2 is installed, else it is refused clearly.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import adbutils
from adbutils.errors import AdbConnectionError, AdbError, AdbTimeout

from devices import frames
from devices.apps import AppResolver
from devices.base import (
    BUTTON_KEYCODES,
    AppNotFound,
    BlackFrame,
    Button,
    DeviceError,
    DeviceGone,
    DeviceInfo,
    DeviceTimeout,
    ScreenCapture,
    TextInputUnsupported,
)
from devices.keys import keycode
from devices.text import adb_keyboard_broadcast, input_text_pieces, is_input_text_safe, quote

log = logging.getLogger(__name__)

T = TypeVar("T")
_EXIT_MARK = "UIS1-EXIT:"


@dataclass(frozen=True)
class ShellOutput:
    stdout: bytes
    stderr: bytes
    status: int | None  # None when the device could not report it


ADB_KEYBOARD = "com.android.adbkeyboard/.AdbIME"
_GONE_MARKERS = ("not found", "offline", "unauthorized", "closed", "no devices", "device still authorizing")


@dataclass
class DriverSettings:
    """Deadlines in seconds, and what the driver may use."""

    command_timeout: float = 10.0
    screenshot_timeout: float = 15.0
    hierarchy_timeout: float = 20.0
    display_id: int | None = None  # multi-display phones: which display to capture
    # png: `screencap -p` (the phone compresses; ~0.1-0.5 MB per frame). raw: `screencap` (RGBA,
    # ~10 MB per 1080x2400 frame, no compression on the phone; the driver encodes the PNG it keeps).
    # raw pays off on a fast link (USB 3, an emulator on the same host) with a slow phone CPU.
    capture: Literal["png", "raw"] = "png"
    use_uiautomator2: bool = True  # when the package is installed
    raise_on_black_frame: bool = False
    app_aliases: Mapping[str, list[str]] = field(default_factory=dict)


class AdbDriver:
    """One device on an adb server. Cheap to create; holds no socket between calls."""

    def __init__(
        self, client: adbutils.AdbClient, serial: str, settings: DriverSettings | None = None
    ) -> None:
        self._client = client
        self._serial = serial
        self.settings = settings or DriverSettings()
        self._device = client.device(serial)
        self._resolver = AppResolver(self.settings.app_aliases)
        self._u2: Any = None
        self._features: str | None = None
        self._lock = asyncio.Lock()  # one action at a time on a phone

    @property
    def serial(self) -> str:
        return self._serial

    # -- plumbing --------------------------------------------------------------------------------
    def _map_error(self, exc: BaseException) -> DeviceError:
        if isinstance(exc, DeviceError):
            return exc
        if isinstance(exc, AdbTimeout | TimeoutError):
            return DeviceTimeout(self._serial, "the device did not answer in time")
        text = str(exc)
        if isinstance(exc, AdbConnectionError):
            return DeviceGone(self._serial, f"cannot reach the adb server: {text}")
        if isinstance(exc, AdbError):
            if any(m in text.lower() for m in _GONE_MARKERS):
                return DeviceGone(self._serial, text)
            return DeviceError(self._serial, text)
        if isinstance(exc, EOFError | OSError):
            return DeviceGone(self._serial, f"connection lost: {exc!r}")
        return DeviceError(self._serial, f"{type(exc).__name__}: {exc}")

    async def _call(self, fn: Callable[[], T], timeout: float) -> T:
        start = time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn), timeout + 1.0)
        except Exception as exc:
            if isinstance(exc, EOFError | OSError) and time.monotonic() - start >= timeout:
                # A read that gave up at its deadline surfaces as a closed stream: it was a timeout.
                raise DeviceTimeout(self._serial, f"the device did not answer within {timeout:g} s") from exc
            raise self._map_error(exc) from exc

    def _run(self, command: str, timeout: float) -> ShellOutput:
        """One command over a fresh transport, every read bounded by ``timeout``.

        adbutils' own ``shell`` waits up to ten minutes for the device to accept the stream (a
        wedged phone never does), so the stream is opened here with the deadline applied from
        the first byte. Shell protocol v2 keeps stdout, stderr and the exit status apart; devices
        without it (Android < 7) get v1 and an exit-status marker.
        """
        if self._features is None:
            self._features = str(self._device.get_features())
        v2 = "shell_v2" in self._features.split(",")
        conn = self._device.open_transport(timeout=timeout)
        try:
            if not v2:
                conn.send_command(f"shell:{command}; echo {_EXIT_MARK}$?")
                conn.check_okay()
                raw: bytes = conn.read_until_close(encoding=None)
                body, _, code = raw.rpartition(_EXIT_MARK.encode())
                if not code.strip().isdigit():
                    return ShellOutput(raw, b"", None)
                return ShellOutput(body.removesuffix(b"\n"), b"", int(code.strip()))
            conn.send_command(f"shell,v2,raw:{command}")
            conn.check_okay()
            out, err = bytearray(), bytearray()
            while True:
                kind, length = struct.unpack("<BI", conn.read_exact(5))
                data = conn.read_exact(length) if length else b""
                if kind == 1:
                    out.extend(data)
                elif kind == 2:
                    err.extend(data)
                elif kind == 3:
                    return ShellOutput(bytes(out), bytes(err), data[0] if data else None)
        finally:
            conn.close()

    async def shell(self, command: str, timeout: float | None = None) -> str:
        """Run a command line (already quoted) and return its output; stdout and stderr merged."""
        t = timeout or self.settings.command_timeout
        result = await self._call(lambda: self._run(command, t), t)
        return (result.stdout + result.stderr).decode("utf-8", "replace")

    async def shell_checked(self, command: str, timeout: float | None = None) -> str:
        """Run a command line; ``DeviceError`` when it exits non-zero."""
        t = timeout or self.settings.command_timeout
        result = await self._call(lambda: self._run(command, t), t)
        if result.status not in (0, None):
            message = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
            raise DeviceError(self._serial, f"`{command}` failed ({result.status}): {message[:300]}")
        return result.stdout.decode("utf-8", "replace")

    # -- observation -----------------------------------------------------------------------------
    async def screenshot(self) -> ScreenCapture:
        raw = self.settings.capture == "raw"
        args: list[str | int] = ["screencap"] if raw else ["screencap", "-p"]
        if self.settings.display_id is not None:
            args += ["-d", self.settings.display_id]
        t = self.settings.screenshot_timeout
        command = quote(*args)
        result = await self._call(lambda: self._run(command, t), t)
        warnings = result.stderr.decode("utf-8", "replace").strip()
        if raw:
            # Decoding the frame and the black check are CPU work: off the event loop.
            image, data, warnings, black = await asyncio.to_thread(
                frames.decode_raw, self._serial, result.stdout, warnings
            )
            width, height = image.size
        else:
            data, warnings, (width, height) = frames.check_png(self._serial, result.stdout, warnings)
            image = None
            black = False
            if frames.maybe_black(data, width, height):  # only then is the frame decoded (off the event loop)
                image, black = await asyncio.to_thread(frames.decode_and_check, self._serial, data)
        if "Multiple displays" in warnings and self.settings.display_id is None:
            log.warning("%s: several displays; capturing the default one (set display_id)", self._serial)
        note = ""
        if black:
            note = "the screen is off" if not await self.is_screen_on() else "the app forbids screenshots"
            if self.settings.raise_on_black_frame:
                raise BlackFrame(self._serial, f"all-black screenshot: {note}")
            log.warning("%s: all-black screenshot (%s)", self._serial, note)
        return ScreenCapture(png=data, width=width, height=height, black=black, note=note, image=image)

    async def is_screen_on(self) -> bool:
        out = await self.shell(quote("dumpsys", "power"))
        return "mHoldingDisplaySuspendBlocker=true" in out or "mWakefulness=Awake" in out

    async def screen_size(self) -> tuple[int, int]:
        out = await self.shell(quote("wm", "size"))
        sizes = dict(re.findall(r"(Physical|Override) size: (\d+x\d+)", out))
        size = sizes.get("Override") or sizes.get("Physical")
        if size is None:
            raise DeviceError(self._serial, f"cannot read the screen size from {out!r}")
        w, h = (int(v) for v in size.split("x"))
        if await self.rotation() % 2:
            w, h = h, w
        return w, h

    async def rotation(self) -> int:
        out = await self.shell(quote("dumpsys", "display"))
        match = re.search(r"orientation=(\d)", out)
        return int(match.group(1)) if match else 0

    async def hierarchy(self) -> str:
        u2 = await self._uiautomator2()
        if u2 is not None:
            t = self.settings.hierarchy_timeout
            return str(await self._call(lambda: u2.dump_hierarchy(), t))
        path = "/sdcard/uis1_window_dump.xml"
        out = await self.shell(
            f"{quote('uiautomator', 'dump', path)} && {quote('cat', path)}; {quote('rm', '-f', path)}",
            timeout=self.settings.hierarchy_timeout,
        )
        start = out.find("<?xml")
        if start < 0:
            raise DeviceError(self._serial, f"uiautomator dump failed: {out.strip()[:200]}")
        return out[start:].strip()

    async def foreground_app(self) -> str:
        out = await self.shell(quote("dumpsys", "window"))
        match = re.search(r"mCurrentFocus=Window\{\S+ \S+ ([A-Za-z0-9_.]+)/", out) or re.search(
            r"mFocusedApp=.*? ([A-Za-z0-9_.]+)/", out
        )
        if match is None:
            out = await self.shell(quote("dumpsys", "activity", "activities"))
            match = re.search(r"mResumedActivity: ActivityRecord\{\S+ \S+ ([A-Za-z0-9_.]+)/", out)
        if match is None:
            raise DeviceError(self._serial, "cannot tell which app is in front")
        return match.group(1)

    async def info(self) -> DeviceInfo:
        keys = (
            "ro.product.model",
            "ro.product.manufacturer",
            "ro.build.version.release",
            "ro.build.version.sdk",
        )
        out = await self.shell("; ".join(quote("getprop", k) for k in keys))
        values = (out.splitlines() + [""] * len(keys))[: len(keys)]
        props = dict(zip(keys, (v.strip() for v in values), strict=True))
        sdk = props["ro.build.version.sdk"]
        return DeviceInfo(
            serial=self._serial,
            model=props["ro.product.model"],
            manufacturer=props["ro.product.manufacturer"],
            android_version=props["ro.build.version.release"],
            sdk=int(sdk) if sdk.isdigit() else None,
            properties=props,
        )

    async def installed_packages(self) -> list[str]:
        out = await self.shell(quote("pm", "list", "packages"))
        return [
            line.removeprefix("package:").strip() for line in out.splitlines() if line.startswith("package:")
        ]

    # -- actions ----------------------------------------------------------------------------------
    @staticmethod
    def _point(x: int, y: int) -> tuple[int, int]:
        # adbutils treats floats <= 1 as fractions of the screen; this driver takes pixels only.
        if not (isinstance(x, int) and isinstance(y, int)) or x < 0 or y < 0:
            raise ValueError(f"coordinates must be non-negative integer pixels, got ({x!r}, {y!r})")
        return x, y

    async def tap(self, x: int, y: int) -> None:
        x, y = self._point(x, y)
        async with self._lock:
            await self.shell(quote("input", "tap", x, y))

    async def long_press(self, x: int, y: int, seconds: float = 1.0) -> None:
        x, y = self._point(x, y)
        ms = max(500, round(seconds * 1000))
        async with self._lock:
            await self.shell(
                quote("input", "swipe", x, y, x, y, ms), timeout=self.settings.command_timeout + seconds
            )

    async def swipe(self, x1: int, y1: int, x2: int, y2: int, seconds: float = 0.4) -> None:
        x1, y1 = self._point(x1, y1)
        x2, y2 = self._point(x2, y2)
        ms = max(50, round(seconds * 1000))
        async with self._lock:
            await self.shell(
                quote("input", "swipe", x1, y1, x2, y2, ms), timeout=self.settings.command_timeout + seconds
            )

    async def key(self, name: str) -> None:
        try:
            code = keycode(name)
        except ValueError as exc:
            raise DeviceError(self._serial, str(exc)) from None
        async with self._lock:
            await self.shell(quote("input", "keyevent", code))

    async def press(self, button: Button) -> None:
        async with self._lock:
            await self.shell(quote("input", "keyevent", BUTTON_KEYCODES[Button(button)]))

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def type_text(self, text: str) -> None:
        async with self._lock:
            if is_input_text_safe(text):
                for piece in input_text_pieces(text):
                    await self.shell_checked(piece.command())
                return
            if await self._has_adb_keyboard():
                await self._type_with_adb_keyboard(text)
                return
            u2 = await self._uiautomator2()
            if u2 is not None:
                # uiautomator2 types through its own input method when installed (else the
                # clipboard) and leaves it selected: put the user's back afterwards.
                previous = await self._current_ime()
                try:
                    await self._call(lambda: u2.send_keys(text), self.settings.command_timeout)
                finally:
                    if previous and previous != await self._current_ime():
                        await self.shell(quote("ime", "set", previous))
                return
        raise TextInputUnsupported(
            self._serial,
            "this text has characters `input text` cannot type; install ADBKeyBoard on the phone "
            "(see the README) or the uiautomator2 extra",
        )

    async def _has_adb_keyboard(self) -> bool:
        out = await self.shell(quote("ime", "list", "-s", "-a"))
        return ADB_KEYBOARD in out.split()

    async def _current_ime(self) -> str:
        value = (await self.shell(quote("settings", "get", "secure", "default_input_method"))).strip()
        return "" if value == "null" else value

    async def _type_with_adb_keyboard(self, text: str) -> None:
        previous = await self._current_ime()
        if previous != ADB_KEYBOARD:
            await self.shell(quote("ime", "enable", ADB_KEYBOARD))
            await self.shell_checked(quote("ime", "set", ADB_KEYBOARD))
        try:
            out = await self.shell(adb_keyboard_broadcast(text))
            if "Broadcast completed" not in out:
                raise DeviceError(self._serial, f"ADBKeyBoard did not take the text: {out.strip()[:200]}")
        finally:
            if previous and previous != ADB_KEYBOARD:
                await self.shell(quote("ime", "set", previous))

    async def open_app(self, name: str) -> str:
        packages = await self.installed_packages()
        try:
            package = self._resolver.resolve(name, packages)
        except LookupError as exc:
            raise AppNotFound(self._serial, str(exc)) from None
        async with self._lock:
            out = await self.shell(
                quote("monkey", "-p", package, "-c", "android.intent.category.LAUNCHER", "1")
            )
        if "Events injected: 1" not in out:
            raise AppNotFound(self._serial, f"{package} has no launchable activity ({out.strip()[-200:]})")
        return package

    # -- uiautomator2 -----------------------------------------------------------------------------
    async def _uiautomator2(self) -> Any:
        """A uiautomator2 session when the package is installed and allowed, else None."""
        if not self.settings.use_uiautomator2:
            return None
        if self._u2 is None:
            try:
                import uiautomator2
            except ImportError:
                self.settings.use_uiautomator2 = False
                return None
            try:
                self._u2 = await self._call(lambda: uiautomator2.connect(self._device), 60.0)
            except DeviceError as exc:
                log.warning("%s: uiautomator2 unavailable (%s); using plain adb", self._serial, exc.message)
                self.settings.use_uiautomator2 = False
                return None
        return self._u2
