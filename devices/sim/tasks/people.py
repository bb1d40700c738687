"""Tasks in Contacts and Messages."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, cast

from devices.sim.apps.contacts import DEFAULT_CONTACTS, Contacts
from devices.sim.apps.messages import Messages
from devices.sim.phone import SimPhone
from devices.sim.tasks.base import ExpertAction, Outcome, Task
from devices.sim.tasks.expert import (
    by_rid,
    dialog_button,
    done,
    open_app,
    read,
    scroll_and_tap,
    tap,
    type_into,
)
from devices.sim.tasks.registry import register

NEW_PEOPLE = (("Quinn", "Adler"), ("Rosa", "Diaz"), ("Sven", "Lund"), ("Tariq", "Aziz"), ("Uma", "Rao"))
REPLIES = ("on my way", "see you at 6", "thanks, got it", "running 10 minutes late", "sounds good!")


def _contacts(phone: SimPhone) -> Contacts:
    return cast(Contacts, phone.app("com.android.contacts"))


def _messages(phone: SimPhone) -> Messages:
    return cast(Messages, phone.app("com.google.android.apps.messaging"))


def _person(rng: random.Random) -> str:
    first, last, _ = rng.choice(DEFAULT_CONTACTS)
    return f"{first} {last}"


def _open_contact(phone: SimPhone, name: str) -> Iterator[ExpertAction]:
    yield open_app("Contacts")
    yield from scroll_and_tap(
        phone, lambda v: v.text.lstrip("★ ") == name and v.rid.endswith("contact_name"), name
    )


@register
class CreateContact(Task):
    name = "create_contact"
    apps = ("com.android.contacts",)
    complexity = 9
    template = "Add a new contact {first} {last} with the phone number {number}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        first, last = rng.choice(NEW_PEOPLE)
        return {
            "first": first,
            "last": last,
            "number": f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
        }

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        c = _contacts(phone).find(f"{self.params['first']} {self.params['last']}")
        return c is not None and c.phone.replace(" ", "") == self.params["number"].replace(" ", "")

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Contacts")
        yield tap(phone, lambda v: v.desc == "Create contact", "the create button")
        yield from type_into(phone, "first_name", self.params["first"])
        yield from type_into(phone, "last_name", self.params["last"])
        yield from type_into(phone, "phone", self.params["number"])
        yield tap(phone, lambda v: v.desc == "Save", "Save")
        yield done()


@register
class DeleteContact(Task):
    name = "delete_contact"
    apps = ("com.android.contacts",)
    complexity = 5
    template = "Delete {name} from my contacts"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"name": _person(rng)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return (
            _contacts(phone).find(self.params["name"]) is None
            and len(_contacts(phone).contacts) == len(DEFAULT_CONTACTS) - 1
        )

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from _open_contact(phone, self.params["name"])
        yield tap(phone, by_rid("delete"), "Delete")
        yield dialog_button(phone, "Delete")
        yield done()


@register
class FavoriteContact(Task):
    name = "favorite_contact"
    apps = ("com.android.contacts",)
    complexity = 4
    template = "Mark {name} as a favourite contact"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"name": _person(rng)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        c = _contacts(phone).find(self.params["name"])
        return c is not None and c.favorite

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from _open_contact(phone, self.params["name"])
        yield tap(phone, lambda v: v.desc == "Favorite", "the star")
        yield done()


@register
class PhoneNumberQuestion(Task):
    name = "phone_number_question"
    apps = ("com.android.contacts",)
    complexity = 4
    question = True
    template = "What is {name}'s phone number?"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"name": _person(rng)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        c = _contacts(phone).find(self.params["name"])
        answer = "".join(ch for ch in (outcome.answer if outcome and outcome.answer else "") if ch.isdigit())
        return c is not None and answer.endswith("".join(ch for ch in c.phone if ch.isdigit()))

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from _open_contact(phone, self.params["name"])
        number = read(phone, lambda v: v.desc == "Phone", "the phone number")
        yield ExpertAction("answer", text=number.text)
        yield done()


@register
class ReplyToMessage(Task):
    name = "reply_to_message"
    apps = ("com.google.android.apps.messaging",)
    complexity = 5
    template = "Reply to {first}: {text}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"first": rng.choice(["Anna", "Ben", "David"]), "text": rng.choice(REPLIES)}

    def _thread(self) -> str:
        return {"Anna": "Anna Schmidt", "Ben": "Ben Okafor", "David": "David Chen"}[self.params["first"]]

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(_messages(phone).last_sent(self._thread()) == self.params["text"])

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Messages")
        yield tap(phone, lambda v: v.desc == self._thread(), self._thread())
        yield from type_into(phone, "compose_message_text", self.params["text"])
        yield tap(phone, lambda v: v.desc == "Send", "Send")
        yield done()


@register
class SendNewMessage(Task):
    name = "send_new_message"
    apps = ("com.google.android.apps.messaging",)
    complexity = 7
    template = "Send {name} a text saying '{text}'"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        first, last, _ = rng.choice(DEFAULT_CONTACTS[3:])
        return {"name": f"{first} {last}", "text": rng.choice(REPLIES)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(_messages(phone).last_sent(self.params["name"]) == self.params["text"])

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Messages")
        yield tap(phone, lambda v: v.desc == "Start chat", "Start chat")
        yield from type_into(phone, "recipient_text_view", self.params["name"].split()[0])
        yield tap(phone, lambda v: v.text == self.params["name"], self.params["name"])
        yield from type_into(phone, "compose_message_text", self.params["text"])
        yield tap(phone, lambda v: v.desc == "Send", "Send")
        yield done()


@register
class MessageFromContactCard(Task):
    name = "message_from_contact_card"
    apps = ("com.android.contacts", "com.google.android.apps.messaging")
    complexity = 7
    template = "Open {name} in Contacts and message them: {text}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"name": _person(rng), "text": rng.choice(REPLIES)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(_messages(phone).last_sent(self.params["name"]) == self.params["text"])

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield from _open_contact(phone, self.params["name"])
        yield tap(phone, by_rid("message"), "Message")
        yield from type_into(phone, "compose_message_text", self.params["text"])
        yield tap(phone, lambda v: v.desc == "Send", "Send")
        yield done()
