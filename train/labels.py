"""Expert labels as training uses them: swipe directions, label checks, and the action a patch injects.

An expert label (``agent.trajectory.ActionLabel``) keeps a dataset's numbers as they are. Two things
about it are decided here, once, when the data is loaded:

- **Which way an expert swipe goes** (METHOD.md §3). A swipe's coordinates are finger motion; a
  stored ``direction`` follows its dataset's convention: ``scroll`` (AndroidControl: scrolling down
  is a finger moving up) or ``finger``. The stored direction is the label (evaluation files give it
  as the check), so it wins over the coordinates; a step where the two disagree is reported.
- **Whether the label can become an action** the policy could have written. One that cannot (an
  ``open`` without an app name, a ``click`` without a point) is reported and its trajectory left out,
  so that no training step ever meets it. A ``terminate`` without a status is a terminate: patches
  write it as ``success``, and matching does not compare a status the expert did not give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from agent.actions import Action, ActionError, action_from_dict
from agent.geometry import Size
from agent.trajectory import ActionLabel, SwipeDirection

SwipeConvention = Literal["scroll", "finger"]

# A scroll moves the content; the finger moves the other way for up/down. AndroidControl's
# left/right are finger motion already (the released code swaps only up and down, as does this).
_FINGER_FOR_SCROLL = {"up": "down", "down": "up", "left": "left", "right": "right"}
_ARGUMENTS = ("action", "coordinate", "coordinate2", "text", "button", "time", "status")


def swipe_direction(start: Sequence[float], end: Sequence[float]) -> str | None:
    """The dominant axis of a finger motion (screen y points down); a tie is vertical; None for no motion."""
    dx, dy = end[0] - start[0], end[1] - start[1]
    if dx == 0 and dy == 0:
        return None
    if abs(dx) > abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def stored_finger_direction(label: ActionLabel, convention: SwipeConvention) -> str | None:
    """The finger direction a label's stored ``direction`` means under its dataset's convention."""
    if label.direction is None:
        return None
    stored = SwipeDirection(label.direction).value
    return _FINGER_FOR_SCROLL[stored] if convention == "scroll" else stored


def coordinate_direction(label: ActionLabel) -> str | None:
    if label.coordinate is None or label.coordinate2 is None:
        return None
    return swipe_direction(label.coordinate, label.coordinate2)


def finger_direction(label: ActionLabel, convention: SwipeConvention = "scroll") -> str | None:
    """Which way an expert swipe's finger moves: the stored direction, else the coordinates."""
    return stored_finger_direction(label, convention) or coordinate_direction(label)


def contradicts(label: ActionLabel, convention: SwipeConvention) -> bool:
    """A swipe whose stored direction and coordinates disagree (a wrong convention, or bad data)."""
    stored, moved = stored_finger_direction(label, convention), coordinate_direction(label)
    return label.action == "swipe" and stored is not None and moved is not None and stored != moved


def expert_action(label: ActionLabel, original: Size, resized: Size, swipe: str | None = None) -> Action:
    """The expert's action as the policy would write it: coordinates in resized-image pixels.

    ``swipe`` is the finger direction the label stands for (``finger_direction``, fixed at import);
    the injected swipe always has it, after scaling and rounding too. Raises ``ActionError`` for a
    label that cannot be an action (``label_problem`` names it when the data is loaded).
    """
    data = {k: v for k, v in label.to_dict().items() if k in _ARGUMENTS}
    for key in ("coordinate", "coordinate2"):
        if key in data:
            data[key] = _scaled(data[key], original, resized)
    if label.action == "swipe":
        wanted = swipe or finger_direction(label)
        if wanted is None:
            raise ActionError("bad_argument", "a swipe label needs coordinates or a direction")
        if "coordinate" not in data or "coordinate2" not in data:
            data["coordinate"], data["coordinate2"] = _standard_swipe(wanted, resized)
        else:
            data["coordinate"], data["coordinate2"] = _keep_direction(
                data["coordinate"], data["coordinate2"], wanted, resized
            )
    if label.action == "long_press" and "time" not in data:
        data["time"] = 1
    if label.action == "terminate" and not (label.status or "").strip():
        data["status"] = "success"
    elif label.action == "terminate":
        data["status"] = data["status"].strip().lower()
    return action_from_dict(data)


def label_problem(label: ActionLabel, size: Size, swipe: str | None = None) -> str | None:
    """Why a label cannot become an action, or None when it can."""
    try:
        expert_action(label, size, size, swipe)
    except ActionError as exc:
        return f"{label.action}: {exc.detail}"
    return None


def _scaled(point: Sequence[float], original: Size, resized: Size) -> list[int]:
    x = min(max(round(point[0] * resized.width / original.width), 0), resized.width - 1)
    y = min(max(round(point[1] * resized.height / original.height), 0), resized.height - 1)
    return [x, y]


def _standard_swipe(direction: str, size: Size) -> tuple[list[int], list[int]]:
    """A half-screen swipe through the centre (labels that store only a direction)."""
    cx, cy, dx, dy = size.width // 2, size.height // 2, size.width // 4, size.height // 4
    ends = {
        "up": ((cx, cy + dy), (cx, cy - dy)),
        "down": ((cx, cy - dy), (cx, cy + dy)),
        "left": ((cx + dx, cy), (cx - dx, cy)),
        "right": ((cx - dx, cy), (cx + dx, cy)),
    }[direction]
    return [*ends[0]], [*ends[1]]


def _keep_direction(
    start: list[int], end: list[int], direction: str, size: Size
) -> tuple[list[int], list[int]]:
    """Scaling each axis by its own factor and rounding can turn a near-diagonal swipe the other
    way, and clamping can flatten one: keep the motion along the label's axis only, and fall back
    to the standard swipe when nothing is left of it."""
    if swipe_direction(start, end) == direction:
        return start, end
    horizontal = direction in ("left", "right")
    flat = [end[0], start[1]] if horizontal else [start[0], end[1]]
    if swipe_direction(start, flat) == direction:
        return start, flat
    return _standard_swipe(direction, size)
