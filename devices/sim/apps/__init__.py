"""The simulated phone's apps. ``APP_CLASSES`` is what a phone installs on boot."""

from devices.sim.apps.base import App
from devices.sim.apps.browser import Browser
from devices.sim.apps.clock import Clock
from devices.sim.apps.contacts import Contacts
from devices.sim.apps.files import Files
from devices.sim.apps.launcher import Launcher
from devices.sim.apps.messages import Messages
from devices.sim.apps.notes import Notes
from devices.sim.apps.settings import Settings
from devices.sim.apps.shop import Shop

APP_CLASSES: tuple[type[App], ...] = (
    Launcher,
    Settings,
    Contacts,
    Messages,
    Clock,
    Notes,
    Browser,
    Shop,
    Files,
)

__all__ = ["APP_CLASSES", "App"]
