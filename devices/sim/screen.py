"""Building blocks apps use to lay out a screen: title bars, rows, scrolling lists, forms, dialogs.

An app's ``build(screen)`` is called on every frame; it describes the current state and attaches
handlers. Layout is a vertical cursor over the content area, so apps read like the screen looks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devices.sim.display import mark_colour
from devices.sim.ui import Handler, View

if TYPE_CHECKING:
    from devices.sim.phone import SimPhone


@dataclass
class TextField:
    """Editable text an app owns; the phone types into whichever field has focus."""

    value: str = ""
    hint: str = ""
    password: bool = False
    on_submit: Handler | None = None
    max_length: int = 5000


@dataclass
class Dialog:
    title: str
    message: str
    buttons: list[tuple[str, Handler]] = field(default_factory=list)


class Screen:
    """The content area between the status bar and the navigation bar."""

    def __init__(self, phone: SimPhone, package: str, top: int, bottom: int) -> None:
        self.phone = phone
        self.package = package
        self.width = phone.width
        self.top = top
        self.bottom = bottom
        self.y = top
        self.root = View(
            "frame", (0, top, self.width, bottom), rid=f"{package}:id/content", fill=phone.theme.background
        )
        self.dialog: Dialog | None = None
        self._slot = 0  # the row height of the list being built, when the profile sets it

    @property
    def scale(self) -> float:
        """Pixels per layout unit: the screen's width over 1080, times the display's UI scale."""
        return self.width / 1080 * self.phone.ui_scale

    def px(self, value: int) -> int:
        return round(value * self.scale)

    def _rid(self, name: str) -> str:
        return f"{self.package}:id/{name}" if name else ""

    def title(
        self, text: str, *, back: Handler | None = None, actions: Sequence[tuple[str, str, Handler]] = ()
    ) -> None:
        h = self.px(168)
        bar = View(
            "frame", (0, self.y, self.width, self.y + h), rid=self._rid("toolbar"), fill=self.phone.theme.bar
        )
        x = 0
        if back is not None:
            bar.add(
                View(
                    "icon",
                    (0, self.y, h, self.y + h),
                    desc="Navigate up",
                    glyph="<",
                    on_tap=back,
                    fill="#5f6368",
                    rid=self._rid("up"),
                )
            )
            x = h
        bar.add(
            View(
                "text",
                (x, self.y, self.width - h * len(actions), self.y + h),
                text=text,
                size=self.px(60),
                rid=self._rid("toolbar_title"),
                ink=self.phone.theme.ink,
            )
        )
        for i, (glyph, desc, handler) in enumerate(actions):
            right = self.width - i * h
            bar.add(
                View(
                    "icon",
                    (right - h, self.y, right, self.y + h),
                    desc=desc,
                    glyph=glyph,
                    on_tap=handler,
                    rid=self._rid(desc.lower().replace(" ", "_")),
                )
            )
        self.root.add(bar)
        self.y += h

    def text(
        self, text: str, *, size: int = 44, height: int = 120, rid: str = "", ink: str | None = None
    ) -> View:
        view = View(
            "text",
            (0, self.y, self.width, self.y + self.px(height)),
            text=text,
            size=self.px(size),
            rid=self._rid(rid),
            ink=ink or self.phone.theme.ink,
        )
        self.root.add(view)
        self.y += self.px(height)
        return view

    def row(
        self,
        text: str,
        *,
        on_tap: Handler | None = None,
        on_long_press: Handler | None = None,
        switch: bool | None = None,
        checkbox: bool | None = None,
        height: int = 168,
        rid: str = "",
        desc: str = "",
        parent: View | None = None,
        y: int | None = None,
        mark: int | None = None,
    ) -> View:
        """One row; ``mark``: a list item's index (``phone.arrange``), drawn as a coloured tile with
        the item's initial when the display profile marks list items."""
        top = self.y if y is None else y
        kind = "switch" if switch is not None else "checkbox" if checkbox is not None else "row"
        # Inside a list whose rows the display profile stretches, a row fills its slot.
        h = self._slot if self._slot and y is not None else self.px(height)
        tile = round(h * 0.6) if mark is not None and self.phone.display.item_marks else 0
        view = View(
            kind,
            (0, top, self.width, top + h),
            text=text,
            on_tap=on_tap,
            on_long_press=on_long_press,
            checked=switch if switch is not None else checkbox,
            rid=self._rid(rid),
            desc=desc,
            size=self.px(48),
            ink=self.phone.theme.ink,
            indent=tile + self.px(24) if tile else 0,
        )
        if tile and mark is not None:
            left, cy = self.px(40), top + h // 2
            initial = (text or desc).lstrip("★ ")[:1].upper()
            view.add(
                View(
                    "icon",
                    (left, cy - tile // 2, left + tile, cy + tile // 2),
                    glyph=initial,
                    fill=mark_colour(mark),
                )
            )
        (parent or self.root).add(view)
        if y is None:
            self.y += self.px(height)
        return view

    def field(self, field: TextField, *, rid: str, height: int = 150) -> View:
        focused = self.phone.focused is field
        view = View(
            "edit",
            (0, self.y, self.width, self.y + self.px(height)),
            text=field.value,
            hint=field.hint,
            password=field.password,
            focused=focused,
            rid=self._rid(rid),
            size=self.px(46),
            on_tap=lambda: self.phone.focus(field),
            text_field=field,
        )
        self.root.add(view)
        self.y += self.px(height)
        return view

    def button(
        self, text: str, on_tap: Handler, *, rid: str = "", height: int = 160, fill: str | None = None
    ) -> View:
        margin = self.px(48)
        view = View(
            "button",
            (margin, self.y + self.px(16), self.width - margin, self.y + self.px(height)),
            text=text,
            on_tap=on_tap,
            rid=self._rid(rid),
            size=self.px(48),
            align="center",
            fill=fill,
        )
        self.root.add(view)
        self.y += self.px(height + 16)
        return view

    def scroll_list(
        self,
        key: str,
        count: int,
        item: Callable[[int, int, View], None],
        *,
        item_height: int = 168,
        rid: str = "list",
        bottom: int | None = None,
    ) -> View:
        """A vertically scrolling list of ``count`` items; ``item(i, y, parent)`` adds item ``i`` at ``y``.

        Only items that are at least partly on screen exist in the tree, as on Android.
        """
        top, end = self.y, bottom or self.bottom
        h = self.px(item_height)
        if self.phone.display.max_rows:  # taller rows: no more than max_rows on screen at once
            h = max(h, (end - top) // self.phone.display.max_rows)
            self._slot = h
        offsets = self.phone.scroll_offsets.setdefault(self.package, {})
        limit = max(0, count * h - (end - top))
        offset = min(offsets.get(key, 0), limit)

        def scroll(dy: int, dx: int) -> None:
            # The content follows the finger: moving it up (dy < 0) reveals items further down.
            offsets[key] = max(0, min(limit, offsets.get(key, 0) - dy))

        container = View(
            "list", (0, top, self.width, end), rid=self._rid(rid), on_scroll=scroll if limit else None
        )
        first = offset // h
        for i in range(first, count):
            y = top + i * h - offset
            if y >= end:
                break
            if y + h > top:
                item(i, y, container)
        self._slot = 0
        # Items drawn past the container edge are clipped: cut their bounds to the container.
        for child in container.walk():
            if child is container:
                continue
            left, ctop, right, cbottom = child.bounds
            child.bounds = (left, max(ctop, top), right, min(cbottom, end))
        container.children = [c for c in container.children if c.bounds[3] - c.bounds[1] > self.px(40)]
        self.root.add(container)
        self.y = end
        return container

    def fab(self, glyph: str, desc: str, on_tap: Handler) -> View:
        """A floating action button in the bottom-right corner."""
        size = self.px(168)
        right, bottom = self.width - self.px(48), self.bottom - self.px(48)
        view = View(
            "icon",
            (right - size, bottom - size, right, bottom),
            desc=desc,
            glyph=glyph,
            on_tap=on_tap,
            rid=self._rid("fab"),
        )
        self.root.add(view)
        return view

    def show_dialog(self, dialog: Dialog) -> None:
        self.dialog = dialog
