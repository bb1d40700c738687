"""Carrying out a UI-S1 action on a ``Device``: map its coordinates to device pixels, then act.

The model speaks in pixels of the smart-resized screenshot; ``to_device_action`` turns an action
into the same action in device pixels (rounded, clamped to the screen), which is what the
trajectory records as executed. ``answer`` and ``terminate`` do nothing on the phone.
"""

from __future__ import annotations

from collections.abc import Callable

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
    Wait,
)
from agent.geometry import ScreenGeometry
from devices.base import Button, Device


def _map_points(action: Action, mapping: Callable[[tuple[int, int]], tuple[int, int]]) -> Action:
    if isinstance(action, Click):
        return Click(coordinate=mapping(action.coordinate))
    if isinstance(action, LongPress):
        return LongPress(coordinate=mapping(action.coordinate), time=action.time)
    if isinstance(action, Swipe):
        return Swipe(coordinate=mapping(action.coordinate), coordinate2=mapping(action.coordinate2))
    return action


def to_device_action(action: Action, geometry: ScreenGeometry) -> Action:
    return _map_points(action, geometry.to_device)


def from_device_action(action: Action, geometry: ScreenGeometry) -> Action:
    """The inverse mapping, for actions a person gave in device pixels (takeover)."""
    return _map_points(action, geometry.to_resized)


async def perform(device: Device, action: Action) -> None:
    """Send one device-pixel action to the phone."""
    if isinstance(action, Click):
        await device.tap(*action.coordinate)
    elif isinstance(action, LongPress):
        await device.long_press(*action.coordinate, seconds=action.time)
    elif isinstance(action, Swipe):
        await device.swipe(*action.coordinate, *action.coordinate2)
    elif isinstance(action, Type):
        await device.type_text(action.text)
    elif isinstance(action, Key):
        await device.key(action.text)
    elif isinstance(action, SystemButtonPress):
        await device.press(Button(action.button.value))
    elif isinstance(action, Open):
        await device.open_app(action.text)
    elif isinstance(action, Wait):
        await device.wait(action.time)
    elif isinstance(action, Answer | Terminate):
        return
