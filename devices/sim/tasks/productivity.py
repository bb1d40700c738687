"""Tasks in Clock, Notes and Files."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, cast

from devices.sim.apps.clock import Clock
from devices.sim.apps.files import DEFAULT_FOLDERS, Files
from devices.sim.apps.notes import Notes
from devices.sim.phone import SimPhone
from devices.sim.tasks.base import ExpertAction, Outcome, Task
from devices.sim.tasks.expert import dialog_button, done, need, open_app, scroll_to, tap, type_into
from devices.sim.tasks.registry import register

LABELS = ("Meds", "Standup", "Pick up kids", "Yoga", "Call mum")


def _clock(phone: SimPhone) -> Clock:
    return cast(Clock, phone.app("com.google.android.deskclock"))


def _notes(phone: SimPhone) -> Notes:
    return cast(Notes, phone.app("com.example.notes"))


def _files(phone: SimPhone) -> Files:
    return cast(Files, phone.app("com.google.android.documentsui"))


def _time(rng: random.Random) -> tuple[int, int]:
    return rng.choice([5, 6, 9, 10, 13, 17, 21, 22]), rng.choice([0, 15, 30, 45, 5])


class _AlarmTask(Task):
    apps = ("com.google.android.deskclock",)

    def _add(self, phone: SimPhone, hour: int, minute: int, label: str = "") -> Iterator[ExpertAction]:
        yield open_app("Clock")
        yield tap(phone, lambda v: v.desc == "Add alarm", "Add alarm")
        yield from type_into(phone, "hour", str(hour))
        yield from type_into(phone, "minute", f"{minute:02d}")
        if label:
            yield from type_into(phone, "label", label)
        yield tap(phone, lambda v: v.desc == "Save", "Save")
        yield done()


@register
class AddAlarm(_AlarmTask):
    name = "add_alarm"
    complexity = 6
    template = "Set an alarm for {hour:02d}:{minute:02d}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        hour, minute = _time(rng)
        return {"hour": hour, "minute": minute}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        alarm = _clock(phone).find(self.params["hour"], self.params["minute"])
        return alarm is not None and alarm.enabled

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from self._add(phone, self.params["hour"], self.params["minute"])


@register
class AddLabelledAlarm(_AlarmTask):
    name = "add_labelled_alarm"
    complexity = 8
    template = "Create an alarm at {hour:02d}:{minute:02d} called {label}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        hour, minute = _time(rng)
        return {"hour": hour, "minute": minute, "label": rng.choice(LABELS)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        alarm = _clock(phone).find(self.params["hour"], self.params["minute"])
        return alarm is not None and alarm.enabled and alarm.label == self.params["label"]

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from self._add(phone, self.params["hour"], self.params["minute"], self.params["label"])


@register
class EnableAlarm(_AlarmTask):
    name = "enable_alarm"
    complexity = 3
    template = "Turn on my {time} alarm"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"time": rng.choice(["07:00", "08:30"])}

    def _alarm(self, phone: SimPhone) -> Any:
        hour, minute = (int(p) for p in self.params["time"].split(":"))
        return _clock(phone).find(hour, minute)

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        others_off = all(not a.enabled for a in _clock(phone).alarms if a is not self._alarm(phone))
        return self._alarm(phone).enabled and others_off

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Clock")
        yield tap(phone, lambda v: v.desc == self.params["time"], self.params["time"])
        yield done()


@register
class DeleteAlarm(_AlarmTask):
    name = "delete_alarm"
    complexity = 4
    template = "Delete the {time} alarm"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"time": rng.choice(["07:00", "08:30"])}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        hour, minute = (int(p) for p in self.params["time"].split(":"))
        return _clock(phone).find(hour, minute) is None and len(_clock(phone).alarms) == 1

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Clock")
        alarm = need(phone, lambda v: v.desc == self.params["time"], self.params["time"])
        yield ExpertAction("long_press", coordinate=alarm.center, time=1.0)
        yield dialog_button(phone, "Delete")
        yield done()


@register
class CreateNote(Task):
    name = "create_note"
    apps = ("com.example.notes",)
    complexity = 6
    template = "Create a note titled '{title}' that says '{body}'"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        title, body = rng.choice(
            [
                ("Groceries", "apples, rice, coffee"),
                ("Trip", "passport and charger"),
                ("Books", "Dune; Neuromancer"),
                ("Gift ideas", "scarf for Anna"),
            ]
        )
        return {"title": title, "body": body}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        note = _notes(phone).find(self.params["title"])
        return note is not None and note.body.strip() == self.params["body"]

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Notes")
        yield tap(phone, lambda v: v.desc == "New note", "New note")
        yield from type_into(phone, "title", self.params["title"])
        yield from type_into(phone, "body", self.params["body"])
        yield tap(phone, lambda v: v.desc == "Save", "Save")
        yield done()


@register
class AppendToNote(Task):
    name = "append_to_note"
    apps = ("com.example.notes",)
    complexity = 5
    template = "Add '{text}' to the end of my {title} note"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"title": "Shopping list", "text": rng.choice([", butter", ", tea", ", oranges"])}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        note = _notes(phone).find(self.params["title"])
        return note is not None and note.body == "milk, eggs, bread" + self.params["text"]

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Notes")
        yield tap(phone, lambda v: v.text == self.params["title"], self.params["title"])
        yield from type_into(phone, "body", self.params["text"])
        yield tap(phone, lambda v: v.desc == "Save", "Save")
        yield done()


@register
class DeleteNote(Task):
    name = "delete_note"
    apps = ("com.example.notes",)
    complexity = 4
    template = "Delete the note called {title}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"title": rng.choice(["Shopping list", "Ideas"])}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return _notes(phone).find(self.params["title"]) is None and len(_notes(phone).notes) == 1

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Notes")
        yield tap(phone, lambda v: v.text == self.params["title"], self.params["title"])
        yield tap(phone, lambda v: v.desc == "Delete", "Delete")
        yield dialog_button(phone, "Delete")
        yield done()


class _FileTask(Task):
    apps = ("com.google.android.documentsui",)

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        folder = rng.choice(["Download", "Documents", "Pictures"])
        return {"folder": folder, "file": rng.choice(DEFAULT_FOLDERS[folder])}

    def _open_options(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Files")
        yield tap(phone, lambda v: v.desc == self.params["folder"], self.params["folder"])
        yield from file_options(phone, self.params["file"])


def file_options(phone: SimPhone, name: str) -> Iterator[ExpertAction]:
    """In an open folder: scroll to the file and long-press it (its Star/Delete dialog opens)."""
    file_pred = lambda v: v.desc == name  # noqa: E731
    yield from scroll_to(phone, file_pred, name)
    yield ExpertAction("long_press", coordinate=need(phone, file_pred, name).center, time=1.0)


@register
class DeleteFile(_FileTask):
    name = "delete_file"
    complexity = 6
    template = "Delete {file} from the {folder} folder"

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        files = _files(phone).folders[self.params["folder"]]
        return (
            self.params["file"] not in files and len(files) == len(DEFAULT_FOLDERS[self.params["folder"]]) - 1
        )

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from self._open_options(phone)
        yield dialog_button(phone, "Delete")
        yield dialog_button(phone, "Delete")
        yield done()


@register
class StarFile(_FileTask):
    name = "star_file"
    complexity = 5
    template = "Star the file {file} in {folder}"

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return (self.params["folder"], self.params["file"]) in _files(phone).starred

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from self._open_options(phone)
        yield dialog_button(phone, "Star")
        yield done()
