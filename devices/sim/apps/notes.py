"""Notes: a list of notes, an editor with title and body, deleting with confirmation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Dialog, Screen, TextField
from devices.sim.ui import View


@dataclass
class Note:
    title: str
    body: str


class Notes(App):
    package = "com.example.notes"
    label = "Notes"
    glyph = "✎"
    color = "#f9ab00"
    activities: ClassVar[dict[str, str]] = {"main": ".NoteListActivity", "edit": ".NoteEditActivity"}

    def reset(self) -> None:
        super().reset()
        self.notes = [Note("Shopping list", "milk, eggs, bread"), Note("Ideas", "a phone agent that learns")]
        self.editing: Note | None = None
        self.title_field = TextField(hint="Title")
        self.body_field = TextField(hint="Note")

    def find(self, title: str) -> Note | None:
        return next((n for n in self.notes if n.title.strip().lower() == title.strip().lower()), None)

    def page_main(self, screen: Screen) -> None:
        screen.title("Notes")

        notes = self.phone.arrange(self.notes, "notes")

        def item(i: int, y: int, parent: View) -> None:
            mark, note = notes[i]
            screen.row(
                note.title or "(untitled)",
                on_tap=lambda: self._edit(note),
                parent=parent,
                y=y,
                rid="note_title",
                mark=mark,
            )

        screen.scroll_list("notes", len(self.notes), item)
        screen.fab("+", "New note", lambda: self._edit(None))

    def page_edit(self, screen: Screen) -> None:
        actions = [("✓", "Save", self._save)]
        if self.editing is not None:
            actions.append(("✗", "Delete", self._confirm_delete))
        screen.title("Edit note" if self.editing else "New note", back=self.up, actions=actions)
        screen.field(self.title_field, rid="title")
        screen.field(self.body_field, rid="body", height=400)

    def _edit(self, note: Note | None) -> None:
        self.editing = note
        self.title_field.value = note.title if note else ""
        self.body_field.value = note.body if note else ""
        self.go("edit")

    def _save(self) -> None:
        title, body = self.title_field.value.strip(), self.body_field.value
        if not title and not body.strip():
            self.up()
            return
        if self.editing is None:
            self.notes.append(Note(title, body))
        else:
            self.editing.title, self.editing.body = title, body
        self.up()

    def _confirm_delete(self) -> None:
        note = self.editing

        def delete() -> None:
            if note in self.notes:
                self.notes.remove(note)
            self.up()

        self.phone.dialog = Dialog(
            "Delete note?", "This note will be deleted.", [("Cancel", lambda: None), ("Delete", delete)]
        )
