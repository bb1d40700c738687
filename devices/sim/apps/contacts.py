"""Contacts: a scrolling list, a detail page, creating and deleting contacts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Dialog, Screen, TextField
from devices.sim.ui import View

DEFAULT_CONTACTS = (
    ("Anna", "Schmidt", "+49 151 2345678"),
    ("Ben", "Okafor", "+44 7700 900123"),
    ("Carla", "Mendes", "+351 912 345 678"),
    ("David", "Chen", "+1 415 555 0134"),
    ("Elif", "Yilmaz", "+90 532 123 4567"),
    ("Farah", "Haddad", "+961 3 123 456"),
    ("George", "Brown", "+1 212 555 0199"),
    ("Hana", "Sato", "+81 90 1234 5678"),
    ("Ivan", "Petrov", "+7 912 345 6789"),
    ("Julia", "Rossi", "+39 347 123 4567"),
    ("Kofi", "Mensah", "+233 24 123 4567"),
    ("Lena", "Novak", "+420 601 123 456"),
    ("Marco", "Silva", "+55 11 91234 5678"),
    ("Nina", "Kowalski", "+48 601 234 567"),
    ("Omar", "Farouk", "+20 100 123 4567"),
    ("Priya", "Sharma", "+91 98765 43210"),
)


@dataclass
class Contact:
    first: str
    last: str
    phone: str
    favorite: bool = False

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}".strip()


class Contacts(App):
    package = "com.android.contacts"
    label = "Contacts"
    glyph = "☺"
    color = "#1e8e3e"
    activities: ClassVar[dict[str, str]] = {
        "main": ".activities.PeopleActivity",
        "detail": ".activities.QuickContactActivity",
        "create": ".activities.ContactEditorActivity",
    }

    def reset(self) -> None:
        super().reset()
        self.contacts = [Contact(f, last, p) for f, last, p in DEFAULT_CONTACTS]
        self.selected: Contact | None = None
        self.form = [TextField(hint="First name"), TextField(hint="Last name"), TextField(hint="Phone")]

    def find(self, name: str) -> Contact | None:
        for contact in self.contacts:
            if contact.name.lower() == name.lower() or contact.first.lower() == name.lower():
                return contact
        return None

    def sorted_contacts(self) -> list[Contact]:
        return sorted(self.contacts, key=lambda c: c.name.lower())

    def page_main(self, screen: Screen) -> None:
        screen.title("Contacts")
        people = self.phone.arrange(self.sorted_contacts(), "people")

        def item(i: int, y: int, parent: View) -> None:
            mark, contact = people[i]
            star = "★ " if contact.favorite else ""
            screen.row(
                star + contact.name,
                on_tap=lambda: self._open(contact),
                parent=parent,
                y=y,
                rid="contact_name",
                mark=mark,
            )

        screen.scroll_list("people", len(people), item)
        screen.fab("+", "Create contact", self._new)

    def page_detail(self, screen: Screen) -> None:
        contact = self.selected
        if contact is None:
            self.up()
            return
        screen.title(
            contact.name, back=self.up, actions=[("★" if contact.favorite else "☆", "Favorite", self._star)]
        )
        screen.row(contact.phone, rid="phone_number", desc="Phone")
        screen.button("Message", lambda: self._message(contact), rid="message")
        screen.button("Delete", lambda: self._confirm_delete(contact), rid="delete", fill="#d93025")

    def page_create(self, screen: Screen) -> None:
        screen.title("Create contact", back=self.up, actions=[("✓", "Save", self._save)])
        for field, rid in zip(self.form, ("first_name", "last_name", "phone"), strict=True):
            screen.field(field, rid=rid)

    def _open(self, contact: Contact) -> None:
        self.selected = contact
        self.go("detail")

    def _new(self) -> None:
        for field in self.form:
            field.value = ""
        self.go("create")

    def _save(self) -> None:
        first, last, phone = (f.value.strip() for f in self.form)
        if not (first or last):
            self.phone.dialog = Dialog("Can't save", "Enter a name first.", [("OK", lambda: None)])
            return
        contact = Contact(first, last, phone)
        self.contacts.append(contact)
        self.selected = contact
        self.pages = ["main", "detail"]

    def _star(self) -> None:
        if self.selected is not None:
            self.selected.favorite = not self.selected.favorite

    def _message(self, contact: Contact) -> None:
        messages = self.phone.app("com.google.android.apps.messaging")
        messages.open_thread(contact.name)  # type: ignore[attr-defined]
        self.phone.start(messages.package)

    def _confirm_delete(self, contact: Contact) -> None:
        def delete() -> None:
            self.contacts.remove(contact)
            self.selected = None
            self.pages = ["main"]

        self.phone.dialog = Dialog(
            "Delete contact?",
            f"{contact.name} will be deleted.",
            [("Cancel", lambda: None), ("Delete", delete)],
        )
