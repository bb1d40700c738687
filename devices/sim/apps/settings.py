"""Settings: Wi-Fi and airplane mode, Bluetooth, brightness and dark theme, About phone.

Under a shuffling display profile the rows of every page are ordered by the layout seed (the
task's seed), as lists are: where "Network & internet" or the Wi-Fi switch sits differs between
instances of a task, so a model has to read the page to find it, not remember where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.render import slider_margin
from devices.sim.screen import Screen
from devices.sim.ui import View

NETWORKS = ("HomeNet", "HomeNet 5G", "CoffeeShop", "Office-Guest")
BLUETOOTH_DEVICES = ("Pixel Buds", "Car Audio", "JBL Flip")


def _nothing() -> None:
    """What a row that opens no page of its own does when tapped."""


class Settings(App):
    package = "com.android.settings"
    label = "Settings"
    glyph = "⚙"
    color = "#5f6368"
    activities: ClassVar[dict[str, str]] = {
        "main": ".Settings",
        "network": ".Settings$NetworkDashboardActivity",
        "wifi": ".Settings$WifiSettingsActivity",
        "bluetooth": ".Settings$ConnectedDeviceDashboardActivity",
        "display": ".Settings$DisplaySettingsActivity",
        "about": ".Settings$MyDeviceInfoActivity",
        "apps": ".Settings$AppDashboardActivity",
        "battery": ".Settings$PowerUsageSummaryActivity",
    }

    def reset(self) -> None:
        super().reset()
        self.paired: list[str] = []

    def _rows(self, key: str, rows: list[Callable[..., object]]) -> None:
        """Draw a page's rows (each called with its ``mark``) in the order the display profile
        gives them: as listed, or shuffled by the layout seed."""
        for mark, draw in self.phone.arrange(rows, f"settings.{key}"):
            draw(mark=mark)

    def page_main(self, screen: Screen) -> None:
        screen.title("Settings")
        s = self.phone.settings

        def row(text: str, page: str, rid: str) -> Callable[..., object]:
            return partial(screen.row, text, on_tap=partial(self.go, page), rid=rid)

        self._rows(
            "main",
            [
                row("Network & internet", "network", "network"),
                row("Connected devices", "bluetooth", "connected_devices"),
                row("Display", "display", "display"),
                row("About phone", "about", "about"),
                row("Apps", "apps", "apps"),
                row("Battery", "battery", "battery"),
            ],
        )
        screen.text(
            f"Wi-Fi {'on' if s.wifi else 'off'} · Bluetooth {'on' if s.bluetooth else 'off'}",
            size=36,
            ink="#5f6368",
        )

    def page_network(self, screen: Screen) -> None:
        s = self.phone.settings
        screen.title("Network & internet", back=self.up)
        self._rows(
            "network",
            [
                partial(screen.row, "Internet", on_tap=partial(self.go, "wifi"), rid="internet"),
                partial(screen.row, "Wi-Fi", switch=s.wifi, on_tap=self._toggle_wifi, rid="wifi_switch"),
                partial(
                    screen.row,
                    "Airplane mode",
                    switch=s.airplane,
                    on_tap=self._toggle_airplane,
                    rid="airplane_switch",
                ),
                partial(screen.row, "Data Saver", on_tap=_nothing, rid="data_saver"),
            ],
        )

    def page_wifi(self, screen: Screen) -> None:
        s = self.phone.settings
        screen.title("Internet", back=self.up)
        screen.row("Wi-Fi", switch=s.wifi, on_tap=self._toggle_wifi, rid="wifi_switch")
        if not s.wifi:
            screen.text("Turn on Wi-Fi to see available networks", size=36, ink="#5f6368")
            return

        networks = self.phone.arrange(NETWORKS, "networks")

        def item(i: int, y: int, parent: View) -> None:
            mark, name = networks[i]
            label = f"{name}  (Connected)" if name == s.wifi_network else name
            screen.row(
                label,
                on_tap=lambda: self._join(name),
                parent=parent,
                y=y,
                rid="network_name",
                desc=name,
                mark=mark,
            )

        screen.scroll_list("networks", len(networks), item)

    def page_bluetooth(self, screen: Screen) -> None:
        s = self.phone.settings
        screen.title("Connected devices", back=self.up)
        self._rows(
            "connected",
            [
                partial(
                    screen.row,
                    "Bluetooth",
                    switch=s.bluetooth,
                    on_tap=self._toggle_bluetooth,
                    rid="bluetooth_switch",
                ),
                partial(screen.row, "Connection preferences", on_tap=_nothing, rid="preferences"),
                partial(screen.row, "Cast", on_tap=_nothing, rid="cast"),
            ],
        )
        if s.bluetooth:
            for mark, name in self.phone.arrange(BLUETOOTH_DEVICES, "bluetooth"):
                label = f"{name}  (Paired)" if name in self.paired else name
                screen.row(label, on_tap=partial(self._pair, name), rid="device_name", desc=name, mark=mark)

    def page_display(self, screen: Screen) -> None:
        s = self.phone.settings
        screen.title("Display", back=self.up)

        def brightness(mark: int) -> None:
            screen.text(
                f"Brightness level: {round(s.brightness * 100 / 255)}%", size=44, rid="brightness_label"
            )
            slider = View(
                "slider",
                (0, screen.y, screen.width, screen.y + screen.px(140)),
                text=str(s.brightness),
                rid=f"{self.package}:id/brightness_slider",
                desc="Brightness",
                on_tap_at=lambda x, y: self.set_brightness_at(x),
            )
            slider.on_scroll = lambda dy, dx: self._nudge_brightness(dx)
            screen.root.add(slider)
            screen.y += screen.px(140)

        self._rows(
            "display",
            [
                brightness,
                partial(
                    screen.row,
                    "Dark theme",
                    switch=s.dark_mode,
                    on_tap=self._toggle_dark,
                    rid="dark_theme_switch",
                ),
                partial(screen.row, "Screen timeout  30 seconds", on_tap=_nothing, rid="timeout"),
                partial(screen.row, "Font size", on_tap=_nothing, rid="font_size"),
            ],
        )

    def set_brightness_at(self, x: int) -> None:
        """A tap on the slider at ``x`` sets the level, as a SeekBar does."""
        margin = slider_margin(self.phone.ui_scale)
        span = self.phone.width - 2 * margin
        self.phone.settings.brightness = max(0, min(255, round((x - margin) * 255 / span)))

    def page_about(self, screen: Screen) -> None:
        screen.title("About phone", back=self.up)
        screen.row(f"Device name  {self.phone.model}", rid="device_name")
        screen.row("Android version  14", rid="android_version")
        screen.row(f"Serial number  {self.phone.serial}", rid="serial")

    def page_apps(self, screen: Screen) -> None:
        screen.title("Apps", back=self.up)
        screen.text(f"{len(self.phone.apps)} apps installed", size=40, rid="apps_count")

    def page_battery(self, screen: Screen) -> None:
        screen.title("Battery", back=self.up)
        screen.text("85% · about 1 day left", size=40, rid="battery_level")

    def _toggle_wifi(self) -> None:
        s = self.phone.settings
        s.wifi = not s.wifi
        if s.wifi:
            s.airplane = False

    def _toggle_airplane(self) -> None:
        s = self.phone.settings
        s.airplane = not s.airplane
        if s.airplane:
            s.wifi = s.bluetooth = False

    def _toggle_bluetooth(self) -> None:
        self.phone.settings.bluetooth = not self.phone.settings.bluetooth

    def _toggle_dark(self) -> None:
        self.phone.settings.dark_mode = not self.phone.settings.dark_mode

    def _join(self, name: str) -> None:
        self.phone.settings.wifi_network = name

    def _pair(self, name: str) -> None:
        if name not in self.paired:
            self.paired.append(name)

    def _nudge_brightness(self, dx: int) -> None:
        s = self.phone.settings
        s.brightness = max(0, min(255, s.brightness + round(dx * 255 / self.phone.width)))
