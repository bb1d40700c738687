"""The simulated phone: apps, system state, input handling, screenshots and the UI hierarchy.

``SimPhone`` is the device model behind the fake adbd. It knows nothing of adb: the shell
interpreter (``devices.sim.shell``) turns ``input tap 10 20`` into ``phone.tap(10, 20)``. All state
changes go through one lock, since adb streams are served concurrently.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from devices.sim import chrome, render
from devices.sim.apps import APP_CLASSES, App
from devices.sim.display import PHYSICAL_DENSITY, STANDARD, DisplayProfile, arranged
from devices.sim.faults import Faults
from devices.sim.keys import (
    KEY_BACK,
    KEY_DEL,
    KEY_ENTER,
    KEY_HOME,
    KEY_MENU,
    KEY_PASTE,
    KEY_POWER,
    KEY_SLEEP,
    KEY_SPACE,
    KEY_WAKEUP,
)
from devices.sim.screen import Dialog, Screen, TextField
from devices.sim.ui import View, hierarchy_xml, hit

if TYPE_CHECKING:
    from PIL import Image

T = TypeVar("T")

ADB_KEYBOARD_IME = "com.android.adbkeyboard/.AdbIME"
U2_IME = "com.github.uiautomator/.AdbKeyboard"
LATIN_IME = "com.android.inputmethod.latin/.LatinIME"


@dataclass(frozen=True)
class Theme:
    background: str
    bar: str
    ink: str


LIGHT = Theme(background="#ffffff", bar="#f1f3f4", ink="#202124")
DARK = Theme(background="#202124", bar="#303134", ink="#e8eaed")


@dataclass
class _Frame:
    """The last drawn screen, by signature, with its encodings made when first asked for."""

    key: tuple[object, ...]
    image: Image.Image
    png: bytes | None = None
    raw: bytes | None = None


@dataclass
class SystemSettings:
    wifi: bool = False
    bluetooth: bool = False
    airplane: bool = False
    dark_mode: bool = False
    brightness: int = 128  # 0-255, as Settings.System.SCREEN_BRIGHTNESS
    wifi_network: str = "HomeNet"


@dataclass
class FileEntry:
    data: bytes
    mode: int = 0o100644
    mtime: int = field(default_factory=lambda: int(time.time()))


class SimPhone:
    """One simulated Android phone. Sizes are pixels; default is a 1080x2400 Pixel-class screen."""

    def __init__(
        self,
        serial: str,
        *,
        width: int = 1080,
        height: int = 2400,
        model: str = "Pixel 8",
        unicode_ime: bool = True,
        clock: str | None = None,
        display: DisplayProfile = STANDARD,
        wallpaper: bool = False,
    ) -> None:
        self.serial = serial
        # A photo behind the home screen: screenshots of it are 2-3 MB PNGs, as on real phones.
        self.wallpaper = wallpaper
        self._wallpaper_image: Image.Image | None = None
        # How the UI is laid out (devices.sim.display): its density is what `wm density` sets and
        # reports; a task's seed becomes the layout seed that orders lists under a shuffling profile.
        self.display = display
        self.density = display.density
        self.layout_seed: int | None = None
        # A fixed status-bar time ("09:41") renders the same screen the same bytes whenever it is
        # drawn (training data is identified by its screenshots); None shows the real time.
        self.clock = clock
        self.width = width
        self.height = height
        self.model = model
        self.lock = threading.RLock()
        self._last_frame: _Frame | None = None
        self.faults = Faults()
        self.settings = SystemSettings()
        self.screen_on = True
        self.rotation = 0
        self.clipboard = ""
        # Input methods: the stock keyboard, plus ADBKeyBoard when ``unicode_ime`` (as a user who
        # followed the README would have it installed).
        self.imes = [LATIN_IME] + ([ADB_KEYBOARD_IME] if unicode_ime else [])
        self.enabled_imes = list(self.imes)
        self.ime = LATIN_IME
        self.installed: set[str] = set()  # packages installed with pm install (no UI of their own)
        self.files: dict[str, FileEntry] = {}
        self.command_log: list[str] = []
        self.u2_running = False
        self.scroll_offsets: dict[str, dict[str, int]] = {}
        self.focused: TextField | None = None
        self.dialog: Dialog | None = None
        self.apps: dict[str, App] = {}
        for app_class in APP_CLASSES:
            app = app_class(self)
            self.apps[app.package] = app
        self.launcher = self.apps["com.android.launcher3"]
        self.stack: list[App] = [self.launcher]
        self.listeners: list[Callable[[str], None]] = []

    # -- state ---------------------------------------------------------------------------------
    @property
    def theme(self) -> Theme:
        return DARK if self.settings.dark_mode else LIGHT

    @property
    def foreground(self) -> App:
        return self.stack[-1]

    def app(self, package: str) -> App:
        return self.apps[package]

    def app_by_label(self, label: str) -> App | None:
        for app in self.apps.values():
            if app.label.lower() == label.strip().lower():
                return app
        return None

    def reset(self) -> None:
        """Back to a freshly booted phone: default settings, every app's data reset, home screen."""
        with self.lock:
            self.settings = SystemSettings()
            self.clipboard = ""
            self.scroll_offsets.clear()
            self.focused = None
            self.dialog = None
            for app in self.apps.values():
                app.reset()
            self.stack = [self.launcher]
            self.screen_on = True
            self.ime = LATIN_IME
            self.layout_seed = None

    @property
    def ui_scale(self) -> float:
        """Widgets and text relative to the physical density (2.0 after `wm density 840`)."""
        return self.density / PHYSICAL_DENSITY

    def arrange(self, items: Sequence[T], key: str) -> list[tuple[int, T]]:
        """A list's items as ``(mark, item)`` in display order: shuffled by the layout seed when the
        display profile says so; ``mark`` is the item's own index, whatever its place."""
        seed = self.layout_seed if self.display.shuffle_lists else None
        return arranged(items, key, seed)

    def _changed(self, what: str) -> None:
        for listener in list(self.listeners):
            listener(what)

    # -- navigation ----------------------------------------------------------------------------
    def start(self, package: str, activity: str | None = None) -> None:
        with self.lock:
            app = self.apps.get(package)
            if app is None:
                raise KeyError(package)
            self.focused = None
            self.dialog = None
            if app is self.launcher:
                self.stack = [self.launcher]
            else:
                self.stack = [s for s in self.stack if s is not app] + [app]
                if activity:
                    app.open_activity(activity)
            self._changed(f"start {package}")

    def home(self) -> None:
        with self.lock:
            self.focused = None
            self.dialog = None
            self.stack = [self.launcher]
            self.launcher.reset_view()
            self._changed("home")

    def back(self) -> None:
        with self.lock:
            if self.focused is not None:  # the first Back hides the keyboard
                self.focused = None
            elif self.dialog is not None:
                self.dialog = None
            elif not self.foreground.back() and len(self.stack) > 1:
                self.stack.pop()
            self._changed("back")

    def focus(self, field: TextField | None) -> None:
        self.focused = field

    # -- input ---------------------------------------------------------------------------------
    def tap(self, x: int, y: int) -> None:
        with self.lock:
            if not self.screen_on:
                return
            view = hit(self.view(), x, y)
            if view is not None:
                if (
                    view.kind not in ("edit", "key")
                    and self.focused is not None
                    and not chrome.on_keyboard(self, y)
                ):
                    self.focused = None
                if view.on_tap_at is not None:
                    view.on_tap_at(x, y)
                elif view.on_tap is not None:
                    view.on_tap()
            elif self.focused is not None and not chrome.on_keyboard(self, y):
                self.focused = None
            self._changed("tap")

    def long_press(self, x: int, y: int) -> None:
        with self.lock:
            view = hit(self.view(), x, y, want="long")
            if view is not None:
                if view.on_long_press is not None:
                    view.on_long_press()
                elif view.on_tap_at is not None:
                    view.on_tap_at(x, y)
                elif view.on_tap is not None:
                    view.on_tap()
            self._changed("long_press")

    def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int) -> None:
        with self.lock:
            if not self.screen_on:
                return
            if abs(x2 - x1) < 20 and abs(y2 - y1) < 20:  # a swipe that does not move is a press
                if duration_ms >= 500:
                    self.long_press(x1, y1)
                else:
                    self.tap(x1, y1)
                return
            view = hit(self.view(), x1, y1, want="scroll")
            if view is not None and view.on_scroll is not None:
                view.on_scroll(y2 - y1, x2 - x1)
            elif self.foreground is self.launcher and y2 - y1 < -self.height // 6:
                self.launcher.open_activity(".AllApps")
            self._changed("swipe")

    def type_text(self, text: str) -> None:
        with self.lock:
            field = self.focused
            if field is None:
                return
            field.value = (field.value + text)[: field.max_length]
            self._changed("text")

    def keyevent(self, code: int) -> None:
        with self.lock:
            if code in (KEY_WAKEUP, KEY_SLEEP, KEY_POWER):
                self.screen_on = code == KEY_WAKEUP or (code == KEY_POWER and not self.screen_on)
            elif not self.screen_on:
                return
            elif code == KEY_HOME:
                self.home()
            elif code == KEY_BACK:
                self.back()
            elif code == KEY_DEL and self.focused is not None:
                self.focused.value = self.focused.value[:-1]
            elif code == KEY_ENTER and self.focused is not None:
                field = self.focused
                if field.on_submit is not None:
                    field.on_submit()
                    # A chat box keeps focus after sending; a search box that led elsewhere does not.
                    if not any(v.text_field is field for v in self.view().walk()):
                        self.focused = None
            elif code == KEY_SPACE:
                self.type_text(" ")
            elif code == KEY_PASTE:
                self.type_text(self.clipboard)
            elif code == KEY_MENU:
                self.foreground.menu()
            self._changed(f"key {code}")

    # -- output --------------------------------------------------------------------------------
    def view(self) -> View:
        """The whole screen as a view tree: status bar, app, dialog, keyboard, navigation bar."""
        with self.lock:
            root = View("frame", (0, 0, self.width, self.height), fill=self.theme.background)
            root.add(chrome.status_bar(self))
            bottom = chrome.keyboard_top(self) if self.focused is not None else chrome.nav_top(self)
            screen = Screen(self, self.foreground.package, chrome.status_height(self), bottom)
            self.foreground.build(screen)
            root.add(screen.root)
            dialog = self.dialog or screen.dialog
            if dialog is not None:
                root.add(chrome.dialog_panel(self, dialog))
            if self.focused is not None:
                root.add(chrome.keyboard(self))
            root.add(chrome.navigation_bar(self))
            return root

    def _frame(self) -> _Frame:
        with self.lock:
            if not self.screen_on or self.foreground.secure or self.faults.black_frames:
                root, background = View("frame", (0, 0, self.width, self.height)), "#000000"
            else:
                root, background = self.view(), self.theme.background
            home = self.wallpaper and root.children and self.foreground is self.launcher
            # An unchanged screen is not drawn again (a phone's compositor does not redraw either).
            key = (render.signature(root), self.width, self.height, background, self.ui_scale, home)
            if self._last_frame is None or self._last_frame.key != key:
                image = render.render(root, (self.width, self.height), background, self.ui_scale)
                if home:
                    image = render.with_wallpaper(image, background, self._wallpaper())
                self._last_frame = _Frame(key, image)
            return self._last_frame

    def _wallpaper(self) -> Image.Image:
        if self._wallpaper_image is None or self._wallpaper_image.size != (self.width, self.height):
            self._wallpaper_image = render.photo((self.width, self.height), seed=len(self.serial))
        return self._wallpaper_image

    def screenshot_png(self) -> bytes:
        """What ``screencap -p`` writes."""
        frame = self._frame()
        if frame.png is None:
            frame.png = render.encode_png(frame.image)
        return frame.png

    def screenshot_raw(self) -> bytes:
        """What ``screencap`` writes without ``-p`` (Android 9+): width, height, pixel format
        (1 = RGBA_8888) and colour space (0 = unknown) as little-endian uint32, then the pixels."""
        frame = self._frame()
        if frame.raw is None:
            header = struct.pack("<4I", self.width, self.height, 1, 0)
            frame.raw = header + frame.image.convert("RGBA").tobytes()
        return frame.raw

    def hierarchy(self) -> str:
        with self.lock:
            return hierarchy_xml(self.view(), self.foreground.package, rotation=self.rotation)

    def current_activity(self) -> str:
        app = self.foreground
        return f"{app.package}/{app.activity}"
