"""The system UI the simulated phone draws around the foreground app: the status bar, a dialog,
the on-screen keyboard and the navigation bar, as view trees with their resource ids (as
SystemUI and the stock keyboard name them), and the lines that divide the screen between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from devices.sim.keys import KEY_APP_SWITCH, KEY_BACK, KEY_DEL, KEY_ENTER, KEY_HOME
from devices.sim.screen import Dialog
from devices.sim.ui import View

if TYPE_CHECKING:
    from devices.sim.phone import SimPhone

KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def status_height(phone: SimPhone) -> int:
    return round(96 * phone.width / 1080)


def nav_top(phone: SimPhone) -> int:
    return phone.height - round(144 * phone.width / 1080)


def keyboard_top(phone: SimPhone) -> int:
    return nav_top(phone) - round(760 * phone.width / 1080)


def on_keyboard(phone: SimPhone, y: int) -> bool:
    """Whether a touch at height ``y`` lands on the keyboard (shown while a field has focus)."""
    return phone.focused is not None and keyboard_top(phone) <= y < nav_top(phone)


def status_bar(phone: SimPhone) -> View:
    """The status bar: the clock on the left, Wi-Fi, Bluetooth and airplane mode on the right."""
    w, theme = phone.width, phone.theme
    status = View(
        "frame",
        (0, 0, w, status_height(phone)),
        rid="com.android.systemui:id/status_bar",
        fill=theme.bar,
    )
    clock = phone.clock or time.strftime("%H:%M")
    status.add(
        View(
            "text",
            status.bounds,
            text=clock,
            size=round(40 * w / 1080),
            ink=theme.ink,
            rid="com.android.systemui:id/clock",
        )
    )
    icons = " ".join(
        t
        for t, on in (
            ("Wi-Fi", phone.settings.wifi),
            ("BT", phone.settings.bluetooth),
            ("✈", phone.settings.airplane),
        )
        if on
    )
    status.add(
        View("text", status.bounds, text=icons, size=round(36 * w / 1080), align="right", ink=theme.ink)
    )
    return status


def dialog_panel(phone: SimPhone, dialog: Dialog) -> View:
    """A dialog over a dimmed screen: title, message and a row of buttons; a button closes it."""
    w, h = phone.width, phone.height
    s = w / 1080 * min(phone.ui_scale, 1.8)  # the panel stays inside the screen at large scales
    scrim = View("frame", (0, status_height(phone), w, nav_top(phone)), fill="#5f6368")
    panel = View(
        "frame",
        (round(80 * s), h // 2 - round(360 * s), w - round(80 * s), h // 2 + round(360 * s)),
        fill=phone.theme.background,
        rid="android:id/parentPanel",
    )
    left, top, right, _ = panel.bounds
    panel.add(
        View(
            "text",
            (left, top + round(40 * s), right, top + round(160 * s)),
            text=dialog.title,
            size=round(56 * s),
            rid="android:id/alertTitle",
            ink=phone.theme.ink,
        )
    )
    panel.add(
        View(
            "text",
            (left, top + round(180 * s), right, top + round(400 * s)),
            text=dialog.message,
            size=round(42 * s),
            rid="android:id/message",
            ink=phone.theme.ink,
        )
    )
    count = max(1, len(dialog.buttons))
    width = (right - left) // count
    for i, (label, handler) in enumerate(dialog.buttons):

        def press(handler: Callable[[], None] = handler) -> None:
            phone.dialog = None
            handler()

        panel.add(
            View(
                "button",
                (left + i * width, top + round(520 * s), left + (i + 1) * width, top + round(680 * s)),
                text=label,
                on_tap=press,
                align="center",
                size=round(46 * s),
                rid=f"android:id/button{i + 1}",
            )
        )
    scrim.add(panel)
    return scrim


def keyboard(phone: SimPhone) -> View:
    """The stock keyboard: three rows of letters, delete, space and enter."""
    w = phone.width
    top, bottom = keyboard_top(phone), nav_top(phone)
    pkg = "com.android.inputmethod.latin"
    board = View("keyboard", (0, top, w, bottom), fill="#e8eaed", rid=f"{pkg}:id/keyboard_view")
    row_h = (bottom - top) // 4
    for r, letters in enumerate(KEYBOARD_ROWS):
        key_w = w // 10
        x0 = (w - key_w * len(letters)) // 2
        for i, ch in enumerate(letters):
            board.add(
                View(
                    "key",
                    (x0 + i * key_w, top + r * row_h, x0 + (i + 1) * key_w, top + (r + 1) * row_h),
                    text=ch,
                    desc=ch,
                    align="center",
                    size=round(52 * w / 1080),
                    on_tap=partial(phone.type_text, ch),
                )
            )
    y = top + 3 * row_h
    board.add(
        View(
            "key",
            (0, y - row_h, w // 10 + w // 20, y),
            text="⌫",
            desc="Delete",
            align="center",
            on_tap=lambda: phone.keyevent(KEY_DEL),
        )
    )
    board.add(
        View(
            "key",
            (w // 5, y, w * 4 // 5, bottom),
            text="space",
            desc="Space",
            align="center",
            on_tap=lambda: phone.type_text(" "),
        )
    )
    board.add(
        View(
            "key",
            (w * 4 // 5, y, w, bottom),
            text="⏎",
            desc="Enter",
            align="center",
            on_tap=lambda: phone.keyevent(KEY_ENTER),
        )
    )
    return board


def navigation_bar(phone: SimPhone) -> View:
    """Back, Home and Overview."""
    w = phone.width
    top = nav_top(phone)
    nav = View(
        "frame", (0, top, w, phone.height), fill="#000000", rid="com.android.systemui:id/navigation_bar"
    )
    third = w // 3
    for i, (glyph, desc, code) in enumerate(
        (("◁", "Back", KEY_BACK), ("○", "Home", KEY_HOME), ("□", "Overview", KEY_APP_SWITCH))
    ):
        nav.add(
            View(
                "key",
                (i * third, top, (i + 1) * third, phone.height),
                text=glyph,
                desc=desc,
                align="center",
                fill="#000000",
                ink="#ffffff",
                size=round(56 * w / 1080),
                rid=f"com.android.systemui:id/{desc.lower()}",
                on_tap=partial(phone.keyevent, code),
            )
        )
    return nav
