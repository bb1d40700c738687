"""The app model of the simulated phone: a package, a label, pages, state and ``build``."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from devices.sim.phone import SimPhone
    from devices.sim.screen import Screen


class App:
    """One app. Subclasses define ``page_<name>(screen)`` methods and their own state.

    Navigation inside the app is a stack of page names; Back pops it, and at the root the phone
    leaves the app, as an Android task does.
    """

    package: ClassVar[str]
    label: ClassVar[str]
    glyph: ClassVar[str] = ""
    color: ClassVar[str] = "#1a73e8"
    # Activity class names by page, as ``dumpsys`` reports them.
    activities: ClassVar[dict[str, str]] = {}
    secure: bool = False  # FLAG_SECURE: screenshots come out black

    def __init__(self, phone: SimPhone) -> None:
        self.phone = phone
        self.pages: list[str] = ["main"]
        self.reset()

    def reset(self) -> None:
        """Fresh app data, as after ``pm clear``."""
        self.pages = ["main"]

    def reset_view(self) -> None:
        self.pages = ["main"]

    @property
    def page(self) -> str:
        return self.pages[-1]

    @property
    def activity(self) -> str:
        return self.activities.get(self.page, ".MainActivity")

    def open_activity(self, activity: str) -> None:
        for page, name in self.activities.items():
            if activity.endswith(name):
                self.pages = ["main"] if page == "main" else ["main", page]
                return
        self.pages = ["main"]

    def go(self, page: str) -> None:
        self.pages.append(page)

    def up(self) -> None:
        if len(self.pages) > 1:
            self.pages.pop()

    def back(self) -> bool:
        if len(self.pages) > 1:
            self.pages.pop()
            return True
        return False

    def menu(self) -> None:
        """What the Menu key does (most apps: nothing)."""

    def build(self, screen: Screen) -> None:
        getattr(self, f"page_{self.page}")(screen)
