"""The UI-S1 action space: ten typed, validated actions and their exact JSON form.

The policy answers with one JSON object per step, e.g. ``{"action": "click", "coordinate": [x, y]}``.
Each action here is a frozen pydantic model whose ``to_json()`` is byte-for-byte what the model is
trained to emit (keys in the order the action space lists its arguments, ``json.dumps`` spacing,
non-ASCII text kept as is), and ``action_from_json()`` reads that form back, strictly.

Coordinates are non-negative integer pixels of whatever image they refer to: the smart-resized
screenshot when the model speaks, device pixels once mapped (see ``agent.geometry``).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

# Lengths a single action may carry. A model that emits more is broken (or being attacked), and a
# phone's text field or app label never needs more.
MAX_TEXT_CHARS = 2000
MAX_APP_NAME_CHARS = 200
MAX_KEY_NAME_CHARS = 64
# An hour of waiting or pressing is never a sensible single step.
MAX_SECONDS = 3600.0

NonNegInt = Annotated[int, Field(ge=0, strict=True)]
Point = tuple[NonNegInt, NonNegInt]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]


class SystemButton(StrEnum):
    BACK = "Back"
    HOME = "Home"
    MENU = "Menu"
    ENTER = "Enter"


class TerminateStatus(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"


class _Action(BaseModel):
    """Shared behaviour: frozen, no unknown keys, exact JSON serialisation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: str  # each action narrows this to its Literal name: the union's discriminator
    # Argument order of the action space: it decides the key order of the emitted JSON.
    arguments: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"action": self.action}
        for name in self.arguments:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, StrEnum):
                value = value.value
            elif isinstance(value, float) and value.is_integer():
                value = int(value)  # "time": 2, as the datasets and the model write it
            data[name] = value
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


class Click(_Action):
    action: Literal["click"] = "click"
    coordinate: Point
    arguments: ClassVar[tuple[str, ...]] = ("coordinate",)


class LongPress(_Action):
    action: Literal["long_press"] = "long_press"
    coordinate: Point
    time: Seconds = 1.0
    arguments: ClassVar[tuple[str, ...]] = ("coordinate", "time")


class Swipe(_Action):
    """A finger motion from ``coordinate`` to ``coordinate2`` (not a scroll direction)."""

    action: Literal["swipe"] = "swipe"
    coordinate: Point
    coordinate2: Point
    arguments: ClassVar[tuple[str, ...]] = ("coordinate", "coordinate2")


class Type(_Action):
    action: Literal["type"] = "type"
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
    arguments: ClassVar[tuple[str, ...]] = ("text",)


class Key(_Action):
    """An Android key event by name (``KEYCODE_ENTER`` or ``ENTER``); never free text."""

    action: Literal["key"] = "key"
    text: Annotated[str, Field(min_length=1, max_length=MAX_KEY_NAME_CHARS, pattern=r"^[A-Za-z0-9_]+$")]
    arguments: ClassVar[tuple[str, ...]] = ("text",)


class SystemButtonPress(_Action):
    action: Literal["system_button"] = "system_button"
    button: SystemButton
    arguments: ClassVar[tuple[str, ...]] = ("button",)

    @field_validator("button", mode="before")
    @classmethod
    def _canonical_case(cls, value: Any) -> Any:
        # Models write "back" as often as "Back"; the enum is the canonical spelling.
        if isinstance(value, str):
            for member in SystemButton:
                if member.value.lower() == value.strip().lower():
                    return member
        return value


class Open(_Action):
    action: Literal["open"] = "open"
    text: Annotated[str, Field(min_length=1, max_length=MAX_APP_NAME_CHARS)]
    arguments: ClassVar[tuple[str, ...]] = ("text",)


class Wait(_Action):
    action: Literal["wait"] = "wait"
    time: Seconds = 2.0
    arguments: ClassVar[tuple[str, ...]] = ("time",)


class Answer(_Action):
    action: Literal["answer"] = "answer"
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
    arguments: ClassVar[tuple[str, ...]] = ("text",)


class Terminate(_Action):
    action: Literal["terminate"] = "terminate"
    status: TerminateStatus
    arguments: ClassVar[tuple[str, ...]] = ("status",)


Action = Annotated[
    Click | LongPress | Swipe | Type | Key | SystemButtonPress | Open | Wait | Answer | Terminate,
    Field(discriminator="action"),
]

# In the order of the UI-S1 action space (the system prompt lists them, and its two example
# outputs are the first two).
ACTION_TYPES: tuple[type[_Action], ...] = (
    Key,
    Click,
    LongPress,
    Swipe,
    Type,
    Answer,
    SystemButtonPress,
    Open,
    Wait,
    Terminate,
)
ACTION_NAMES: tuple[str, ...] = tuple(t.model_fields["action"].default for t in ACTION_TYPES)
_BY_NAME: dict[str, type[_Action]] = dict(zip(ACTION_NAMES, ACTION_TYPES, strict=True))

_ACTION_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)


class ActionError(ValueError):
    """An action object that is not one of the ten, or has a bad argument."""

    def __init__(self, reason: Literal["bad_json", "unknown_action", "bad_argument"], detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def action_from_dict(data: Any) -> Action:
    """Validate one action object (already decoded JSON); raise ``ActionError`` with the reason."""
    if not isinstance(data, dict):
        raise ActionError("bad_json", f"an action must be a JSON object, got {type(data).__name__}")
    name = data.get("action")
    if not isinstance(name, str) or name not in _BY_NAME:
        raise ActionError("unknown_action", f"unknown action {name!r}; expected one of {list(ACTION_NAMES)}")
    try:
        return _ACTION_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ActionError("bad_argument", _summarise(exc)) from None


def action_from_json(text: str) -> Action:
    """Parse the exact JSON the model emits. Strict: no NaN, no duplicate keys, one object."""
    try:
        data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise ActionError("bad_json", f"not valid JSON: {exc}") from None
    return action_from_dict(data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in an action")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        # Drop the union tag pydantic puts first ("click.coordinate.0" -> "coordinate.0").
        loc = ".".join(str(p) for p in err["loc"][1:]) or "action"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
