"""Clock: alarms that can be switched, added (hour, minute, label) and deleted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Dialog, Screen, TextField
from devices.sim.ui import View


@dataclass
class Alarm:
    hour: int
    minute: int
    label: str = ""
    enabled: bool = True

    @property
    def time(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}"


class Clock(App):
    package = "com.google.android.deskclock"
    label = "Clock"
    glyph = "◷"
    color = "#e37400"
    activities: ClassVar[dict[str, str]] = {"main": ".DeskClock", "add": ".alarms.AlarmEditActivity"}

    def reset(self) -> None:
        super().reset()
        self.alarms = [Alarm(7, 0, "Wake up", enabled=False), Alarm(8, 30, "Gym", enabled=False)]
        self.hour = TextField(hint="Hour (0-23)")
        self.minute = TextField(hint="Minute (0-59)")
        self.label_field = TextField(hint="Label")

    def find(self, hour: int, minute: int) -> Alarm | None:
        return next((a for a in self.alarms if (a.hour, a.minute) == (hour, minute)), None)

    def page_main(self, screen: Screen) -> None:
        screen.title("Alarm")
        alarms = sorted(self.alarms, key=lambda a: (a.hour, a.minute))

        def item(i: int, y: int, parent: View) -> None:
            alarm = alarms[i]
            text = f"{alarm.time}  {alarm.label}".strip()
            screen.row(
                text,
                switch=alarm.enabled,
                on_tap=lambda: self._toggle(alarm),
                on_long_press=lambda: self._confirm_delete(alarm),
                parent=parent,
                y=y,
                rid="alarm",
                desc=alarm.time,
                mark=i,
            )

        screen.scroll_list("alarms", len(alarms), item)
        screen.fab("+", "Add alarm", self._new)

    def page_add(self, screen: Screen) -> None:
        screen.title("Add alarm", back=self.up, actions=[("✓", "Save", self._save)])
        screen.field(self.hour, rid="hour")
        screen.field(self.minute, rid="minute")
        screen.field(self.label_field, rid="label")

    def _toggle(self, alarm: Alarm) -> None:
        alarm.enabled = not alarm.enabled

    def _new(self) -> None:
        self.hour.value = self.minute.value = self.label_field.value = ""
        self.go("add")

    def _save(self) -> None:
        try:
            hour, minute = int(self.hour.value.strip()), int(self.minute.value.strip())
        except ValueError:
            hour = minute = -1
        if not (0 <= hour <= 23 and 0 <= minute <= 59):
            self.phone.dialog = Dialog(
                "Invalid time", "Enter an hour 0-23 and a minute 0-59.", [("OK", lambda: None)]
            )
            return
        existing = self.find(hour, minute)
        if existing is not None:
            existing.enabled = True
            existing.label = self.label_field.value.strip() or existing.label
        else:
            self.alarms.append(Alarm(hour, minute, self.label_field.value.strip()))
        self.up()

    def _confirm_delete(self, alarm: Alarm) -> None:
        self.phone.dialog = Dialog(
            "Delete alarm?",
            f"The {alarm.time} alarm will be deleted.",
            [("Cancel", lambda: None), ("Delete", lambda: self.alarms.remove(alarm))],
        )
