"""The action-matching rule (METHOD.md §3): when a predicted action counts as the expert's.

Matching defines the accuracy part of the reward, when a rollout is patched or ends, and the SOP
metric, so it lives in one place. A prediction is in pixels of the smart-resized screenshot the
model saw; the expert label is in original screenshot pixels; both are normalised to [0, 1] by
their own sizes before any comparison.

Where the paper and the released code disagree, the switches in ``MatchSettings`` select either;
the defaults are this project's reading (**Ours** in METHOD.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from agent.actions import (
    Action,
    Answer,
    Click,
    Key,
    LongPress,
    Open,
    Swipe,
    SystemButtonPress,
    Terminate,
    Type,
)
from agent.geometry import Size
from agent.trajectory import ActionLabel, Box
from train.labels import SwipeConvention, finger_direction, swipe_direction

# The released code enlarges every candidate box 1.2x about its centre before the hit test, and
# accepts a point within 0.04 (normalised) of the expert's: a tap near a small target's edge counts.
BOX_ENLARGE = 1.2
POINT_DISTANCE = 0.04


@dataclass(frozen=True)
class MatchSettings:
    box_enlarge: float = BOX_ENLARGE
    distance_threshold: float = POINT_DISTANCE
    # "target" (Ours): only the smallest listed box that contains the expert point, i.e. the
    # element itself, not the list or screen that encloses it; "all_boxes": any listed box.
    boxes: Literal["target", "all_boxes"] = "target"
    # "answer" (Ours): an expert answer must be predicted as answer; "type": the released code's
    # rule, which demands a type action for answer and key labels.
    answer_as: Literal["answer", "type"] = "answer"
    empty_text_matches: bool = False  # released code: an empty predicted text matches anything
    terminate_status: bool = True  # Ours: compare terminate's status when the expert has one
    # A click inside the app icon's box counts as opening it: the icon's own box (the label's bbox,
    # else the smallest listed box) under "target", any listed box under "all_boxes".
    open_by_click: bool = True


@dataclass(frozen=True)
class Match:
    type_match: bool
    full_match: bool

    @classmethod
    def none(cls) -> Match:
        return cls(False, False)


@dataclass(frozen=True)
class Expected:
    """One expert step, ready to match against: the label with its evaluation options folded in."""

    label: ActionLabel
    size: Size  # the original screenshot the label's pixels refer to
    convention: SwipeConvention = "scroll"  # what a stored swipe ``direction`` means (train.labels)

    @classmethod
    def of(
        cls,
        expert: ActionLabel,
        size: Size,
        check_options: ActionLabel | None = None,
        convention: SwipeConvention = "scroll",
    ) -> Expected:
        """Merge a step's ``check_options`` (candidate boxes, swipe direction) into its label."""
        if check_options is None:
            return cls(expert, size, convention)
        extra = {
            k: v
            for k, v in (
                ("candidate_bbox", check_options.candidate_bbox),
                ("direction", check_options.direction),
                ("bbox", check_options.bbox),
            )
            if v
        }
        return cls(expert.model_copy(update=extra), size, convention)

    def point(self) -> tuple[float, float] | None:
        if self.label.coordinate is None:
            return None
        x, y = self.label.coordinate
        return x / self.size.width, y / self.size.height

    def boxes(self) -> list[tuple[float, float, float, float]]:
        listed: list[Box] = list(self.label.candidate_bbox or [])
        if not listed and self.label.bbox is not None:
            listed = [self.label.bbox]
        w, h = self.size.width, self.size.height
        return [(x1 / w, y1 / h, x2 / w, y2 / h) for x1, y1, x2, y2 in listed]

    def finger_direction(self) -> str | None:
        """Which way the expert's finger moved: the stored direction wins over the coordinates."""
        return finger_direction(self.label, self.convention)

    def icon_boxes(self, settings: MatchSettings) -> list[tuple[float, float, float, float]]:
        """The boxes a click may hit to count as ``open``: the icon's own (its bbox, else the smallest
        listed box; a listed container would accept a tap anywhere on it), or any under all_boxes."""
        boxes = self.boxes()
        if settings.boxes == "all_boxes":
            return boxes
        if self.label.bbox is not None:
            x1, y1, x2, y2 = self.label.bbox
            return [
                (x1 / self.size.width, y1 / self.size.height, x2 / self.size.width, y2 / self.size.height)
            ]
        return [min(boxes, key=_area)] if boxes else []


# Normalised coordinates are quotients: a point exactly on an edge or at exactly the threshold
# distance may come out a few ulps past it. Edges and thresholds count as inside, so allow for that.
ROUNDING = 1e-9


def _inside(point: tuple[float, float], box: tuple[float, float, float, float], enlarge: float) -> bool:
    # Grown about its centre by the same amount on each side: at enlarge 1, exactly the listed edges.
    x1, y1, x2, y2 = box
    grow_x, grow_y = abs(x2 - x1) * (enlarge - 1) / 2, abs(y2 - y1) * (enlarge - 1) / 2
    inside_x = min(x1, x2) - grow_x - ROUNDING <= point[0] <= max(x1, x2) + grow_x + ROUNDING
    return inside_x and min(y1, y2) - grow_y - ROUNDING <= point[1] <= max(y1, y2) + grow_y + ROUNDING


def _area(box: tuple[float, float, float, float]) -> float:
    return abs(box[2] - box[0]) * abs(box[3] - box[1])


def _target_boxes(expected: Expected, settings: MatchSettings) -> list[tuple[float, float, float, float]]:
    """The target element: the smallest listed box that holds the expert point; none when no box
    holds it (a box elsewhere is not the element tapped, and the distance rule still applies)."""
    boxes = expected.boxes()
    point = expected.point()
    if settings.boxes == "all_boxes" or point is None:
        return boxes
    holding = [b for b in boxes if _inside(point, b, 1.0)]
    return [min(holding, key=_area)] if holding else []


def _hits(point: tuple[float, float], expected: Expected, settings: MatchSettings) -> bool:
    if any(_inside(point, box, settings.box_enlarge) for box in _target_boxes(expected, settings)):
        return True
    target = expected.point()
    return target is not None and math.dist(point, target) <= settings.distance_threshold + ROUNDING


def _text_matches(predicted: str, expected: str | None, settings: MatchSettings) -> bool:
    said, wanted = predicted.strip().lower(), (expected or "").strip().lower()
    if not said:
        return settings.empty_text_matches
    return said in wanted or wanted in said


def _normalised(point: tuple[int, int], resized: Size) -> tuple[float, float]:
    return point[0] / resized.width, point[1] / resized.height


def match(
    predicted: Action, resized: Size, expected: Expected, settings: MatchSettings | None = None
) -> Match:
    """Whether ``predicted`` (resized-image pixels) has the expert's type, and fully matches it."""
    settings = settings or MatchSettings()
    label = expected.label
    kind = label.action
    if kind in ("click", "long_press"):
        if predicted.action != kind:
            return Match.none()
        assert isinstance(predicted, Click | LongPress)
        return Match(True, _hits(_normalised(predicted.coordinate, resized), expected, settings))
    if kind == "swipe":
        if not isinstance(predicted, Swipe):
            return Match.none()
        said = swipe_direction(predicted.coordinate, predicted.coordinate2)
        return Match(True, said is not None and said == expected.finger_direction())
    if kind == "open":
        if isinstance(predicted, Open):
            return Match(True, _text_matches(predicted.text, label.text, settings))
        if (
            settings.open_by_click
            and isinstance(predicted, Click)
            and (icons := expected.icon_boxes(settings))
        ):
            hit = any(
                _inside(_normalised(predicted.coordinate, resized), b, settings.box_enlarge) for b in icons
            )
            return Match(hit, hit)
        return Match.none()
    if kind in ("type", "answer") or (kind == "key" and settings.answer_as == "type"):
        wanted = Type if kind == "type" or settings.answer_as == "type" else Answer
        if not isinstance(predicted, wanted):
            return Match.none()
        return Match(True, _text_matches(predicted.text, label.text, settings))
    if kind == "key":
        if not isinstance(predicted, Key):
            return Match.none()
        return Match(True, predicted.text.strip().upper() == (label.text or "").strip().upper())
    if kind == "system_button":
        if not isinstance(predicted, SystemButtonPress):
            return Match.none()
        return Match(True, predicted.button.value.lower() == (label.button or "").strip().lower())
    if kind == "terminate":
        if not isinstance(predicted, Terminate):
            return Match.none()
        wanted_status = (label.status or "").strip().lower()
        return Match(
            True,
            not settings.terminate_status or not wanted_status or predicted.status.value == wanted_status,
        )
    if kind == "wait":
        return Match(predicted.action == "wait", predicted.action == "wait")
    return Match.none()
