"""Declarative tasks on the simulated phone, in the android_world style.

A task is a class: its attributes are its spec (``apps``, ``complexity``, a goal ``template``),
``sample`` draws parameters, ``initialize`` puts the phone in the starting state,
``is_successful`` checks the phone's state afterwards, and ``solve`` is the expert: a generator
that looks at the live phone and yields the next ``ExpertAction`` after the previous one has
been carried out. Expert actions are the UI-S1 action space in device pixels.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from devices.base import Button, Device
from devices.keys import keycode
from devices.sim.keys import KEY_BACK, KEY_ENTER, KEY_HOME, KEY_MENU
from devices.sim.phone import SimPhone
from devices.sim.ui import View

BUTTON_CODES = {"Back": KEY_BACK, "Home": KEY_HOME, "Menu": KEY_MENU, "Enter": KEY_ENTER}


@dataclass(frozen=True)
class ExpertAction:
    """One step in the UI-S1 action space, coordinates in device pixels."""

    action: str
    coordinate: tuple[int, int] | None = None
    coordinate2: tuple[int, int] | None = None
    text: str | None = None
    button: str | None = None
    time: float | None = None
    status: str | None = None
    # The tapped element's bounds (left, top, right, bottom): what a dataset's ``bbox`` records,
    # kept out of the action itself.
    bbox: tuple[int, int, int, int] | None = field(default=None, compare=False)
    target: str = field(default="", compare=False)  # what the tapped element says (its text or label)

    def to_dict(self) -> dict[str, Any]:
        """The action's JSON object, as UI-S1 writes it."""
        data: dict[str, Any] = {"action": self.action}
        for key in ("coordinate", "coordinate2", "text", "button", "time", "status"):
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, float) and value.is_integer():
                value = int(value)
            data[key] = value
        return data


def click(view: View) -> ExpertAction:
    return ExpertAction(
        "click", coordinate=view.center, bbox=view.bounds, target=view.text or view.desc or view.hint
    )


class TaskError(RuntimeError):
    """The expert could not find what it needed on screen (a bug in a task or an app)."""


@dataclass
class Outcome:
    """What running actions on a phone led to: the answer given and how the episode ended."""

    answer: str | None = None
    status: str | None = None


def execute(phone: SimPhone, action: ExpertAction, outcome: Outcome | None = None) -> None:
    """Carry out an expert action directly on a phone (no adb): for generating and checking."""
    kind = action.action
    if kind == "click" and action.coordinate:
        phone.tap(*action.coordinate)
    elif kind == "long_press" and action.coordinate:
        phone.long_press(*action.coordinate)
    elif kind == "swipe" and action.coordinate and action.coordinate2:
        phone.swipe(*action.coordinate, *action.coordinate2, 400)
    elif kind == "type" and action.text is not None:
        phone.type_text(action.text)
    elif kind == "key" and action.text:
        phone.keyevent(keycode(action.text))
    elif kind == "system_button" and action.button:
        phone.keyevent(BUTTON_CODES[action.button])
    elif kind == "open" and action.text:
        app = phone.app_by_label(action.text)
        if app is None:
            raise TaskError(f"no app labelled {action.text!r}")
        phone.start(app.package)
    elif kind == "answer" and outcome is not None:
        outcome.answer = action.text
    elif kind == "terminate" and outcome is not None:
        outcome.status = action.status


async def perform(device: Device, action: ExpertAction, outcome: Outcome | None = None) -> None:
    """Carry out an expert action through any ``Device`` (the adb driver, for instance)."""
    kind = action.action
    if kind == "click" and action.coordinate:
        await device.tap(*action.coordinate)
    elif kind == "long_press" and action.coordinate:
        await device.long_press(*action.coordinate, seconds=action.time or 1.0)
    elif kind == "swipe" and action.coordinate and action.coordinate2:
        await device.swipe(*action.coordinate, *action.coordinate2)
    elif kind == "type" and action.text is not None:
        await device.type_text(action.text)
    elif kind == "key" and action.text:
        await device.key(action.text)
    elif kind == "system_button" and action.button:
        await device.press(Button(action.button))
    elif kind == "open" and action.text:
        await device.open_app(action.text)
    elif kind == "wait":
        await device.wait(action.time or 1.0)
    elif kind == "answer" and outcome is not None:
        outcome.answer = action.text
    elif kind == "terminate" and outcome is not None:
        outcome.status = action.status


class Task:
    """Base class; subclasses set the spec attributes and implement the four methods."""

    name: ClassVar[str]
    apps: ClassVar[tuple[str, ...]]
    complexity: ClassVar[int]  # rough number of expert steps
    template: ClassVar[str]
    question: ClassVar[bool] = False  # answered with the answer action
    # The right action depends on the agent's own earlier actions, not only on the screen.
    history: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any], seed: int = 0) -> None:
        self.params = params
        self.seed = seed

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {}

    @classmethod
    def create(cls, seed: int = 0) -> Task:
        return cls(cls.sample(random.Random(f"{cls.__name__}:{seed}")), seed)

    @property
    def goal(self) -> str:
        return self.template.format(**self.params)

    def initialize(self, phone: SimPhone) -> None:
        """The task's starting state; under a shuffling display profile, its seed orders the lists."""
        phone.reset()
        phone.layout_seed = self.seed

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        raise NotImplementedError

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        raise NotImplementedError

    def run_expert(self, phone: SimPhone, max_steps: int = 60) -> tuple[list[ExpertAction], Outcome]:
        """Initialise, then let the expert act on the phone directly; the actions and outcome."""
        self.initialize(phone)
        outcome = Outcome()
        actions: list[ExpertAction] = []
        for action in self.solve(phone):
            actions.append(action)
            execute(phone, action, outcome)
            if len(actions) > max_steps:
                raise TaskError(f"{self.name}: expert exceeded {max_steps} steps")
        return actions, outcome

    async def run_expert_on(
        self, phone: SimPhone, device: Device, max_steps: int = 60
    ) -> tuple[list[ExpertAction], Outcome]:
        """The same, with every action sent through ``device`` (the phone's production driver)."""
        self.initialize(phone)
        outcome = Outcome()
        actions: list[ExpertAction] = []
        for action in self.solve(phone):
            actions.append(action)
            await perform(device, action, outcome)
            if len(actions) > max_steps:
                raise TaskError(f"{self.name}: expert exceeded {max_steps} steps")
        return actions, outcome
