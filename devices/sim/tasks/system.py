"""Tasks in Settings and on the home screen."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, ClassVar

from devices.sim.apps.settings import BLUETOOTH_DEVICES, NETWORKS
from devices.sim.phone import SimPhone
from devices.sim.tasks.base import ExpertAction, Outcome, Task
from devices.sim.tasks.expert import by_rid, done, need, open_app, read, tap, tap_text
from devices.sim.tasks.registry import register


class _Toggle(Task):
    """Switch one system setting to a target value from the opposite one."""

    apps = ("com.android.settings",)
    complexity = 4
    setting: ClassVar[str]
    target: ClassVar[bool]
    page: ClassVar[str]  # the Settings row that leads to the switch
    switch: ClassVar[str]  # the switch's resource id

    def initialize(self, phone: SimPhone) -> None:
        super().initialize(phone)
        setattr(phone.settings, self.setting, not self.target)

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(getattr(phone.settings, self.setting)) is self.target

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Settings")
        yield tap_text(phone, self.page)
        yield tap(phone, by_rid(self.switch), self.switch)
        yield done()


@register
class WifiOn(_Toggle):
    name = "wifi_on"
    template = "Turn on Wi-Fi"
    setting, target, page, switch = "wifi", True, "Network & internet", "wifi_switch"


@register
class WifiOff(_Toggle):
    name = "wifi_off"
    template = "Turn off Wi-Fi"
    setting, target, page, switch = "wifi", False, "Network & internet", "wifi_switch"


@register
class BluetoothOn(_Toggle):
    name = "bluetooth_on"
    template = "Turn Bluetooth on"
    setting, target, page, switch = "bluetooth", True, "Connected devices", "bluetooth_switch"


@register
class BluetoothOff(_Toggle):
    name = "bluetooth_off"
    template = "Switch off Bluetooth"
    setting, target, page, switch = "bluetooth", False, "Connected devices", "bluetooth_switch"


@register
class DarkThemeOn(_Toggle):
    name = "dark_theme_on"
    template = "Turn on dark mode"
    setting, target, page, switch = "dark_mode", True, "Display", "dark_theme_switch"


@register
class DarkThemeOff(_Toggle):
    name = "dark_theme_off"
    template = "Turn off the dark theme"
    setting, target, page, switch = "dark_mode", False, "Display", "dark_theme_switch"


@register
class AirplaneModeOn(_Toggle):
    name = "airplane_mode_on"
    template = "Turn on airplane mode"
    setting, target, page, switch = "airplane", True, "Network & internet", "airplane_switch"


@register
class ConnectToNetwork(Task):
    name = "connect_to_network"
    apps = ("com.android.settings",)
    complexity = 6
    template = "Turn on Wi-Fi and connect to the {network} network"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"network": rng.choice(NETWORKS[1:])}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return phone.settings.wifi and phone.settings.wifi_network == self.params["network"]

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Settings")
        yield tap_text(phone, "Network & internet")
        yield tap_text(phone, "Internet")
        if not phone.settings.wifi:
            yield tap(phone, by_rid("wifi_switch"), "the Wi-Fi switch")
        yield tap(phone, lambda v: v.desc == self.params["network"], self.params["network"])
        yield done()


@register
class PairBluetoothDevice(Task):
    name = "pair_bluetooth_device"
    apps = ("com.android.settings",)
    complexity = 5
    template = "Pair my phone with the {device}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"device": rng.choice(BLUETOOTH_DEVICES)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        settings = phone.app("com.android.settings")
        return phone.settings.bluetooth and self.params["device"] in settings.paired  # type: ignore[attr-defined]

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Settings")
        yield tap_text(phone, "Connected devices")
        if not phone.settings.bluetooth:
            yield tap(phone, by_rid("bluetooth_switch"), "the Bluetooth switch")
        yield tap(phone, lambda v: v.desc == self.params["device"], self.params["device"])
        yield done()


@register
class BrightnessExtreme(Task):
    name = "brightness_extreme"
    apps = ("com.android.settings",)
    complexity = 4
    template = "Set the screen brightness to the {level}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"level": rng.choice(["maximum", "minimum"])}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        b = phone.settings.brightness
        return b >= 250 if self.params["level"] == "maximum" else b <= 5

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Settings")
        yield tap_text(phone, "Display")
        slider = need(phone, by_rid("brightness_slider"), "the brightness slider")
        left, top, right, bottom = slider.bounds
        x = right - 20 if self.params["level"] == "maximum" else left + 20
        yield ExpertAction("click", coordinate=(x, (top + bottom) // 2))
        yield done()


@register
class AndroidVersionQuestion(Task):
    name = "android_version_question"
    apps = ("com.android.settings",)
    complexity = 4
    question = True
    template = "Which Android version is this phone running?"

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return outcome is not None and (outcome.answer or "").strip().endswith("14")

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Settings")
        yield tap_text(phone, "About phone")
        version = read(phone, lambda v: v.text.startswith("Android version"), "the Android version row")
        yield ExpertAction("answer", text=version.text.removeprefix("Android version").strip())
        yield done()


@register
class OpenApp(Task):
    name = "open_app"
    apps = ("com.android.launcher3",)
    complexity = 1
    template = "Open the {app} app"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"app": rng.choice(["Clock", "Contacts", "Files", "Messages", "Notes", "Shop", "Browser"])}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(phone.foreground.label == self.params["app"])

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app(self.params["app"])
        yield done()


@register
class OpenAppFromHome(Task):
    """Open an app by tapping its icon, starting inside another app."""

    name = "open_app_from_home"
    apps = ("com.android.launcher3",)
    complexity = 3
    template = "Go to the home screen and tap the {app} icon"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"app": rng.choice(["Clock", "Contacts", "Files", "Notes"])}

    def initialize(self, phone: SimPhone) -> None:
        super().initialize(phone)
        phone.start("com.android.settings")

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(phone.foreground.label == self.params["app"])

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield ExpertAction("system_button", button="Home")
        yield tap(
            phone,
            lambda v: v.kind == "icon" and v.desc == self.params["app"],
            f"the {self.params['app']} icon",
        )
        yield done()
