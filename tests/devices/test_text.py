from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.sim.phone import SimPhone
from devices.sim.screen import TextField
from devices.sim.shell import run
from devices.text import adb_keyboard_broadcast, input_text_pieces, is_input_text_safe, quote

NASTY = [
    "; rm -rf /sdcard",
    'it\'s "quoted"',
    "`reboot`",
    "$(rm -rf /)",
    "${HOME} $PATH $?",
    "a\nb",
    "tab\there",
    "100% %s %%s \\n \\",
    "| cat /etc/passwd & echo > /x < /y #comment",
]


def _typing_phone() -> tuple[SimPhone, TextField]:
    phone = SimPhone("t")
    field = TextField()
    phone.focus(field)
    phone.command_log.clear()
    return phone, field


@pytest.mark.parametrize("text", NASTY)
def test_hostile_text_is_typed_literally_and_never_executed(text: str) -> None:
    phone, field = _typing_phone()
    for piece in input_text_pieces(text):
        result = run(phone, piece.command())
        assert result.code == 0, result.stderr
    assert field.value == text.replace("\n", "").replace("\t", "")
    assert all(cmd.startswith("input ") for cmd in phone.command_log), phone.command_log


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=300))
def test_any_printable_ascii_round_trips_through_the_phone_shell(text: str) -> None:
    phone, field = _typing_phone()
    pieces = input_text_pieces(text)
    for piece in pieces:
        assert run(phone, piece.command()).code == 0
    assert field.value == text
    assert len(phone.command_log) == len(pieces)
    assert all(cmd.startswith("input text ") for cmd in phone.command_log)


def test_unicode_is_not_for_input_text_and_goes_by_base64_broadcast() -> None:
    assert not is_input_text_safe("你好")
    assert not is_input_text_safe("🚗")
    with pytest.raises(ValueError, match="ASCII"):
        input_text_pieces("café")
    command = adb_keyboard_broadcast("你好; rm -rf /")
    assert command == "am broadcast -a ADB_INPUT_B64 --es msg 5L2g5aW9OyBybSAtcmYgLw=="
    assert shlex.split(command)[-1] == "5L2g5aW9OyBybSAtcmYgLw=="


def test_newlines_and_tabs_become_key_events() -> None:
    pieces = input_text_pieces("a b\nc\td")
    assert [p.command() for p in pieces] == [
        "input text a%sb",
        "input keyevent 66",
        "input text c",
        "input keyevent 61",
        "input text d",
    ]


def test_quote_keeps_every_argument_one_literal_word() -> None:
    args = ["input", "text", "a b", "$(x)", "'", ""]
    assert shlex.split(quote(*args)) == args
