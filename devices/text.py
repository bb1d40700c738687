"""Turning text into adb commands that type it, without ever letting it act as shell syntax.

Android's ``input text`` takes a single argument, types ASCII only and turns ``%s`` into a space.
So the text is split into pieces the command can type: spaces become ``%s``, a literal ``%s`` is
split between two commands, newlines and tabs become key events, and each piece is passed
single-quoted (``shlex.quote``), so the phone's shell hands it over as one literal word whatever
it contains: ``;``, quotes, backticks, ``$()``. Text with other characters needs an input method
that takes Unicode (``adb_keyboard_broadcast``).
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

# `input text` pieces are kept short: long ones are slow and some builds drop characters.
MAX_PIECE = 128


def quote(*args: str | int) -> str:
    """A shell command line from literal arguments: each one reaches the program unchanged."""
    return " ".join(shlex.quote(str(a)) for a in args)


def is_input_text_safe(text: str) -> bool:
    """Whether ``input text`` can type it: printable ASCII plus newline and tab."""
    return all(32 <= ord(c) < 127 or c in "\n\t" for c in text)


@dataclass(frozen=True)
class TypePiece:
    """One step of typing: either text for ``input text`` or a key code."""

    text: str = ""
    keycode: int | None = None

    def command(self) -> str:
        if self.keycode is not None:
            return quote("input", "keyevent", self.keycode)
        return quote("input", "text", self.text)


def input_text_pieces(text: str) -> list[TypePiece]:
    """The ``input text`` / ``input keyevent`` steps that type ``text`` (printable ASCII, \\n, \\t)."""
    if not is_input_text_safe(text):
        raise ValueError("input text can only type printable ASCII")
    pieces: list[TypePiece] = []
    buf = ""

    def flush() -> None:
        nonlocal buf
        if buf:
            pieces.append(TypePiece(text=buf))
            buf = ""

    for ch in text:
        if ch == "\n":
            flush()
            pieces.append(TypePiece(keycode=66))  # KEYCODE_ENTER
            continue
        if ch == "\t":
            flush()
            pieces.append(TypePiece(keycode=61))  # KEYCODE_TAB
            continue
        if ch == "s" and buf.endswith("%"):
            flush()  # "%" then "s" in separate commands, so Android never sees "%s"
        buf += "%s" if ch == " " else ch
        if len(buf) >= MAX_PIECE and not buf.endswith("%"):
            flush()
    flush()
    return pieces


def adb_keyboard_broadcast(text: str) -> str:
    """The ADBKeyBoard broadcast that types any Unicode text (base64, so nothing needs quoting)."""
    payload = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return quote("am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg", payload)
