"""Messages: conversations, a thread with a compose box, starting a chat with a contact."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Screen, TextField
from devices.sim.ui import View

ME = "me"


@dataclass
class Message:
    sender: str
    text: str


DEFAULT_THREADS = {
    "Anna Schmidt": [Message("Anna Schmidt", "Are we still meeting at 6?")],
    "Ben Okafor": [Message(ME, "Thanks for the book!"), Message("Ben Okafor", "Any time :)")],
    "David Chen": [Message("David Chen", "Call me when you land")],
}


class Messages(App):
    package = "com.google.android.apps.messaging"
    label = "Messages"
    glyph = "✉"
    color = "#1967d2"
    activities: ClassVar[dict[str, str]] = {
        "main": ".ui.ConversationListActivity",
        "thread": ".ui.conversation.ConversationActivity",
        "new": ".ui.contact.ContactPickerActivity",
    }

    def reset(self) -> None:
        super().reset()
        self.threads = {name: list(msgs) for name, msgs in DEFAULT_THREADS.items()}
        self.current: str | None = None
        self.compose = TextField(hint="Text message", on_submit=self._send)
        self.search = TextField(hint="Type a name")

    def open_thread(self, name: str) -> None:
        self.threads.setdefault(name, [])
        self.current = name
        self.compose.value = ""
        self.pages = ["main", "thread"]

    def last_sent(self, name: str) -> str | None:
        mine = [m.text for m in self.threads.get(name, []) if m.sender == ME]
        return mine[-1] if mine else None

    def page_main(self, screen: Screen) -> None:
        screen.title("Messages")
        names = [n for n in self.threads if self.threads[n]] + [
            n for n in self.threads if not self.threads[n]
        ]

        threads = self.phone.arrange(names, "threads")

        def item(i: int, y: int, parent: View) -> None:
            mark, name = threads[i]
            last = self.threads[name][-1].text if self.threads[name] else "No messages yet"
            screen.row(
                f"{name}: {last}",
                on_tap=lambda: self.open_thread(name),
                parent=parent,
                y=y,
                rid="conversation",
                desc=name,
                mark=mark,
            )

        screen.scroll_list("threads", len(threads), item)
        screen.fab("+", "Start chat", self._new_chat)

    def page_thread(self, screen: Screen) -> None:
        name = self.current or ""
        screen.title(name, back=self.up)
        msgs = self.threads.get(name, [])
        compose_top = screen.bottom - screen.px(170)

        def item(i: int, y: int, parent: View) -> None:
            msg = msgs[i]
            align = "right" if msg.sender == ME else "left"
            parent.add(
                View(
                    "text",
                    (0, y, screen.width, y + screen.px(130)),
                    text=msg.text,
                    align=align,
                    size=screen.px(44),
                    rid=f"{self.package}:id/message_text",
                    ink="#1967d2" if msg.sender == ME else self.phone.theme.ink,
                )
            )

        screen.scroll_list(
            "thread:" + name, len(msgs), item, item_height=130, rid="messages", bottom=compose_top
        )
        screen.y = compose_top
        edit = screen.field(self.compose, rid="compose_message_text", height=170)
        edit.bounds = (0, edit.bounds[1], screen.width - screen.px(200), edit.bounds[3])
        screen.root.add(
            View(
                "icon",
                (screen.width - screen.px(200), compose_top, screen.width, screen.bottom),
                desc="Send",
                glyph="➤",
                on_tap=self._send,
                rid=f"{self.package}:id/send_button",
            )
        )

    def page_new(self, screen: Screen) -> None:
        screen.title("New conversation", back=self.up)
        screen.field(self.search, rid="recipient_text_view")
        contacts = self.phone.app("com.android.contacts")
        query = self.search.value.strip().lower()
        people = [c.name for c in contacts.sorted_contacts() if query in c.name.lower()]  # type: ignore[attr-defined]

        def item(i: int, y: int, parent: View) -> None:
            screen.row(
                people[i],
                on_tap=lambda: self.open_thread(people[i]),
                parent=parent,
                y=y,
                rid="contact_name",
                mark=i,
            )

        screen.scroll_list("people:" + query, len(people), item)

    def _new_chat(self) -> None:
        self.search.value = ""
        self.go("new")

    def _send(self) -> None:
        text = self.compose.value.strip()
        if self.current and text:
            self.threads[self.current].append(Message(ME, text))
            self.compose.value = ""
