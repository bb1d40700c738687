"""Reading the focused field from a uiautomator dump, and what an unreadable one means."""

from __future__ import annotations

import pytest

from devices.hierarchy import HierarchyError, focused_is_password, focused_node

DUMP = """<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>
<hierarchy rotation="0">
  <node index="0" class="android.widget.FrameLayout" focused="{outer}" password="false">
    <node index="0" class="android.widget.EditText" text="" focused="{name}" password="false" />
    <node index="1" class="android.widget.EditText" text="••••" focused="{card}" password="true" />
  </node>
</hierarchy>"""


def dump(focused: str | None) -> str:
    flags = {k: "true" if k == focused else "false" for k in ("outer", "name", "card")}
    return DUMP.format(**flags)


@pytest.mark.parametrize(
    ("focused", "password"), [("card", True), ("name", False), ("outer", False), (None, False)]
)
def test_the_focused_field_says_whether_it_hides_what_is_typed(focused: str | None, password: bool) -> None:
    assert focused_is_password(dump(focused)) is password
    assert (focused_node(dump(focused)) is None) is (focused is None)


def test_a_focused_container_yields_to_its_focused_field() -> None:
    both = dump("card").replace('focused="false" password="false">', 'focused="true" password="false">', 1)
    assert focused_is_password(both)


@pytest.mark.parametrize(
    "bad", ["", "ERROR: null root node returned by UiTestAutomationBridge.", "<node/>", "<a>" * 3]
)
def test_a_dump_that_is_not_a_hierarchy_is_an_error_not_a_guess(bad: str) -> None:
    with pytest.raises(HierarchyError):
        focused_node(bad)
