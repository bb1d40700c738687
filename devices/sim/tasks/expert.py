"""What the expert solvers are made of: find on screen, tap, scroll to, type into, open, finish.

Each helper looks at the phone's current view tree (what uiautomator would dump) and yields
actions; since a solver is a generator, the next lookup happens only after the previous action
has been carried out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from devices.sim.phone import SimPhone
from devices.sim.tasks.base import ExpertAction, TaskError, click
from devices.sim.ui import View

MAX_SCROLLS = 12


def find(phone: SimPhone, predicate: Callable[[View], bool]) -> View | None:
    for view in phone.view().walk():
        if predicate(view) and (view.clickable or view.kind == "edit" or view.on_long_press):
            return view
    return None


def read(phone: SimPhone, predicate: Callable[[View], bool], what: str) -> View:
    """A view to read from (text on screen), clickable or not."""
    for view in phone.view().walk():
        if predicate(view):
            return view
    raise TaskError(f"expert cannot see {what} on {phone.current_activity()}")


def by_text(text: str, *, exact: bool = True) -> Callable[[View], bool]:
    def match(view: View) -> bool:
        if exact:
            return view.text == text or view.desc == text
        return text.lower() in view.text.lower() or text.lower() in view.desc.lower()

    return match


def by_rid(suffix: str) -> Callable[[View], bool]:
    return lambda view: view.rid.endswith(f":id/{suffix}")


def need(phone: SimPhone, predicate: Callable[[View], bool], what: str) -> View:
    view = find(phone, predicate)
    if view is None:
        raise TaskError(f"expert cannot find {what} on {phone.current_activity()}")
    return view


def tap(phone: SimPhone, predicate: Callable[[View], bool], what: str) -> ExpertAction:
    return click(need(phone, predicate, what))


def tap_text(phone: SimPhone, text: str, *, exact: bool = True) -> ExpertAction:
    return tap(phone, by_text(text, exact=exact), repr(text))


def dialog_button(phone: SimPhone, label: str) -> ExpertAction:
    """Tap a button of the dialog on screen (Delete, Remove, OK...)."""
    return tap(
        phone, lambda v: v.text == label and v.rid.startswith("android:id/button"), f"the {label} button"
    )


def scroll_to(phone: SimPhone, predicate: Callable[[View], bool], what: str) -> Iterator[ExpertAction]:
    """Swipe the list up (finger moving up) until the item is fully on screen."""
    for _ in range(MAX_SCROLLS):
        view = find(phone, predicate)
        if view is not None and view.bounds[3] - view.bounds[1] >= 100:
            return
        lists = [v for v in phone.view().walk() if v.scrollable]
        if not lists:
            break
        left, top, right, bottom = lists[-1].bounds
        x = (left + right) // 2
        yield ExpertAction(
            "swipe", coordinate=(x, bottom - (bottom - top) // 5), coordinate2=(x, top + (bottom - top) // 5)
        )
    if find(phone, predicate) is None:
        raise TaskError(f"expert cannot scroll to {what}")


def scroll_and_tap(phone: SimPhone, predicate: Callable[[View], bool], what: str) -> Iterator[ExpertAction]:
    yield from scroll_to(phone, predicate, what)
    yield tap(phone, predicate, what)


def type_into(phone: SimPhone, field_rid: str, text: str) -> Iterator[ExpertAction]:
    """Tap the field, then type (the model's ``type`` goes to the focused field)."""
    field = need(phone, by_rid(field_rid), f"field {field_rid}")
    if not field.focused:
        yield click(field)
    yield ExpertAction("type", text=text)


def open_app(label: str) -> ExpertAction:
    return ExpertAction("open", text=label)


def back() -> ExpertAction:
    return ExpertAction("system_button", button="Back")


def done(status: str = "success") -> ExpertAction:
    return ExpertAction("terminate", status=status)


def hide_keyboard(phone: SimPhone) -> Iterator[ExpertAction]:
    if phone.focused is not None:
        yield back()
