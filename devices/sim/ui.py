"""The simulated phone's view tree: what it draws, what uiautomator dumps, what a tap hits.

A screen is a tree of ``View``s with absolute pixel bounds. The same tree is rendered to PNG
(``devices.sim.render``), serialised as uiautomator XML (``hierarchy_xml``) and hit-tested for
input (``hit``), so the picture, the hierarchy and the behaviour can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

Bounds = tuple[int, int, int, int]  # left, top, right, bottom (right/bottom exclusive)
Handler = Callable[[], None]


@dataclass
class View:
    """One node. ``kind`` picks the Android class and the look; handlers make it interactive."""

    kind: str  # frame, text, button, edit, switch, icon, list, row, image, keyboard, key
    bounds: Bounds
    text: str = ""
    desc: str = ""
    rid: str = ""
    hint: str = ""
    checked: bool | None = None  # set for switches and checkboxes
    focused: bool = False
    selected: bool = False
    enabled: bool = True
    password: bool = False
    on_tap: Handler | None = None
    on_tap_at: Callable[[int, int], None] | None = None  # for views where the point matters (sliders)
    on_long_press: Handler | None = None
    # Scroll containers: called with the finger's vertical (dy) or horizontal (dx) motion.
    on_scroll: Callable[[int, int], None] | None = None
    children: list[View] = field(default_factory=list)
    text_field: object | None = None  # the TextField an edit view shows
    # Look: background and text colours, font size, glyph drawn for icons.
    fill: str | None = None
    ink: str = "#202124"
    size: int = 44
    glyph: str = ""
    align: str = "left"
    indent: int = 0  # text starts this far right of the usual inset (room for a row's mark)

    def add(self, *views: View) -> View:
        self.children.extend(views)
        return self

    @property
    def clickable(self) -> bool:
        return self.on_tap is not None or self.on_tap_at is not None

    @property
    def scrollable(self) -> bool:
        return self.on_scroll is not None

    @property
    def center(self) -> tuple[int, int]:
        left, top, right, bottom = self.bounds
        return (left + right) // 2, (top + bottom) // 2

    def contains(self, x: int, y: int) -> bool:
        left, top, right, bottom = self.bounds
        return left <= x < right and top <= y < bottom

    def walk(self) -> Iterator[View]:
        yield self
        for child in self.children:
            yield from child.walk()


ANDROID_CLASS = {
    "frame": "android.widget.FrameLayout",
    "list": "androidx.recyclerview.widget.RecyclerView",
    "row": "android.widget.LinearLayout",
    "text": "android.widget.TextView",
    "button": "android.widget.Button",
    "edit": "android.widget.EditText",
    "switch": "android.widget.Switch",
    "checkbox": "android.widget.CheckBox",
    "icon": "android.widget.ImageView",
    "image": "android.widget.ImageView",
    "keyboard": "android.inputmethodservice.KeyboardView",
    "key": "android.widget.Button",
    "slider": "android.widget.SeekBar",
}


def hit(root: View, x: int, y: int, *, want: str = "tap") -> View | None:
    """The topmost (last drawn) view under the point that handles ``want`` (tap/long/scroll)."""
    found: View | None = None
    for view in root.walk():  # pre-order: later views are drawn over earlier ones
        if not view.contains(x, y) or not view.enabled:
            continue
        if (
            (want == "tap" and view.clickable)
            or (want == "long" and (view.on_long_press or view.clickable))
            or (want == "scroll" and view.on_scroll)
        ):
            found = view
    return found


def find(
    root: View, *, text: str | None = None, rid: str | None = None, desc: str | None = None
) -> View | None:
    for view in root.walk():
        if text is not None and view.text != text:
            continue
        if rid is not None and view.rid != rid:
            continue
        if desc is not None and view.desc != desc:
            continue
        return view
    return None


def _bool(value: bool) -> str:
    return "true" if value else "false"


def hierarchy_xml(root: View, package: str, *, rotation: int = 0) -> str:
    """The uiautomator dump format: one ``<node>`` per view, attributes in the tool's order."""
    lines = ["<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>", f'<hierarchy rotation="{rotation}">']

    def emit(view: View, index: int, depth: int) -> None:
        left, top, right, bottom = view.bounds
        attrs = [
            ("index", str(index)),
            ("text", "•" * len(view.text) if view.password else view.text),
            ("resource-id", view.rid),
            ("class", ANDROID_CLASS.get(view.kind, "android.view.View")),
            ("package", package),
            ("content-desc", view.desc),
            ("checkable", _bool(view.checked is not None)),
            ("checked", _bool(bool(view.checked))),
            ("clickable", _bool(view.clickable)),
            ("enabled", _bool(view.enabled)),
            ("focusable", _bool(view.kind == "edit" or view.clickable)),
            ("focused", _bool(view.focused)),
            ("scrollable", _bool(view.scrollable)),
            ("long-clickable", _bool(view.on_long_press is not None)),
            ("password", _bool(view.password)),
            ("selected", _bool(view.selected)),
            ("bounds", f"[{left},{top}][{right},{bottom}]"),
        ]
        if view.hint:
            attrs.append(("hint", view.hint))
        body = " ".join(f"{k}={quoteattr(v)}" for k, v in attrs)
        pad = "  " * depth
        if not view.children:
            lines.append(f"{pad}<node {body} />")
            return
        lines.append(f"{pad}<node {body}>")
        for i, child in enumerate(view.children):
            emit(child, i, depth + 1)
        lines.append(f"{pad}</node>")

    emit(root, 0, 1)
    lines.append("</hierarchy>")
    return "\n".join(lines)
