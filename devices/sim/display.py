"""Display profiles of the simulated phone: how big its UI is drawn and how its lists are laid out.

A vision model reads the screen at a few hundred image tokens (a 1080x2400 frame shrunk to about
200x450 pixels), where the ``standard`` look's 44-px text is 8 px tall and a list shows a dozen
rows of look-alike text. The ``learnable`` profile is the phone a small model can learn on:

- a UI scale, as Android's display density does (``adb shell wm density 840`` on a 420-dpi phone
  doubles every widget and glyph; the phone answers ``wm density`` with it);
- lists that show at most ``max_rows`` rows at once, each row with a mark (a coloured tile with
  the item's initial) that tells items apart at a glance;
- list order drawn from the task's seed, so that where an item sits is not a constant the model
  can memorise instead of reading the screen.

System chrome (status bar, navigation bar, keyboard) keeps the physical size: a keyboard twice
as tall would cover the fields being typed into. Everything an app draws scales.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

PHYSICAL_DENSITY = 420  # dpi of the simulated 1080x2400 Pixel-class screen (what `wm density` reports)

# Tile colours for list marks: far apart in hue and in lightness, white glyphs legible on each.
MARK_COLOURS = (
    "#d93025",
    "#1a73e8",
    "#188038",
    "#e37400",
    "#9334e6",
    "#007b83",
    "#b31412",
    "#3c4043",
    "#c5221f",
    "#174ea6",
    "#0d652d",
    "#a142f4",
)


@dataclass(frozen=True)
class DisplayProfile:
    name: str
    density: int = PHYSICAL_DENSITY  # the UI scale is density / PHYSICAL_DENSITY
    max_rows: int | None = None  # rows a scrolling list shows at once (None: as many as fit)
    item_marks: bool = False  # a coloured tile with the item's initial at the start of list rows
    shuffle_lists: bool = False  # list order drawn from the layout seed (the task's seed)


STANDARD = DisplayProfile("standard")
# The standard look with lists and Settings pages in the seed's order: instances of a task that
# differ in where things are, for evaluating a full-size model (the retraining gate's default).
VARIED = DisplayProfile("varied", shuffle_lists=True)
LEARNABLE = DisplayProfile("learnable", density=672, max_rows=5, item_marks=True, shuffle_lists=True)
PROFILES = {p.name: p for p in (STANDARD, VARIED, LEARNABLE)}


def profile(name: str) -> DisplayProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown display profile {name!r}; choose one of {', '.join(PROFILES)}") from None


def arranged(items: Sequence[T], key: str, seed: int | None) -> list[tuple[int, T]]:
    """``(index, item)`` pairs in the order a list named ``key`` shows them under layout ``seed``
    (None: as given). ``index`` is the item's place in ``items``: its mark, wherever it is shown."""
    out = list(enumerate(items))
    if seed is not None:
        random.Random(f"{key}:{seed}").shuffle(out)
    return out


def mark_colour(index: int) -> str:
    """The tile colour of the ``index``-th item of a list: distinct within a dozen items."""
    return MARK_COLOURS[index % len(MARK_COLOURS)]
