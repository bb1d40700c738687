"""The home screen: a grid of app icons, and the app drawer (swipe up, or the Apps row)."""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Screen
from devices.sim.ui import View


class Launcher(App):
    package = "com.android.launcher3"
    label = "Launcher"
    activities: ClassVar[dict[str, str]] = {"main": ".Launcher", "AllApps": ".AllApps"}

    def _apps(self) -> list[App]:
        return sorted((a for a in self.phone.apps.values() if a is not self), key=lambda a: a.label)

    def page_main(self, screen: Screen) -> None:
        apps = [app for _, app in self.phone.arrange(self._apps(), "home")]
        # A larger UI scale fits fewer columns (4 at the physical density, 3 from 1.5x) and rows.
        cols = 4 if self.phone.ui_scale < 1.5 else 3
        cell_w = screen.width // cols
        top = screen.top + screen.px(200)
        rows = -(-len(apps) // cols)
        cell_h = min(screen.px(300), (screen.bottom - top) // rows)
        label = min(screen.px(36), round(cell_w / 7))
        screen.root.add(
            View(
                "text",
                (0, screen.top, screen.width, top),
                text="Home",
                size=screen.px(56),
                align="center",
                ink=self.phone.theme.ink,
                rid=f"{self.package}:id/workspace_title",
            )
        )
        for i, app in enumerate(apps):
            r, c = divmod(i, cols)
            left, y = c * cell_w, top + r * cell_h
            screen.root.add(
                View(
                    "icon",
                    (left + screen.px(40), y, left + cell_w - screen.px(40), y + cell_w - screen.px(80)),
                    desc=app.label,
                    glyph=app.glyph,
                    fill=app.color,
                    on_tap=partial(self.phone.start, app.package),
                    rid=f"{self.package}:id/icon",
                ),
                View(
                    "text",
                    (left, y + cell_w - screen.px(80), left + cell_w, y + cell_w - screen.px(10)),
                    text=app.label,
                    size=label,
                    align="center",
                    ink=self.phone.theme.ink,
                    on_tap=partial(self.phone.start, app.package),
                ),
            )

    def page_AllApps(self, screen: Screen) -> None:  # noqa: N802 - the activity's name
        apps = self.phone.arrange(self._apps(), "apps")
        screen.title("All apps", back=self.up)

        def item(i: int, y: int, parent: View) -> None:
            mark, app = apps[i]
            screen.row(
                app.label,
                on_tap=lambda: self.phone.start(app.package),
                parent=parent,
                y=y,
                rid="app_name",
                desc=app.package,
                mark=mark,
            )

        screen.scroll_list("apps", len(apps), item)
