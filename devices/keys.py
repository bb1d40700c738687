"""Android key codes by name (``KeyEvent.KEYCODE_*``), for the driver and the simulated phone."""

from __future__ import annotations

KEYCODES: dict[str, int] = {
    "HOME": 3,
    "BACK": 4,
    "CALL": 5,
    "ENDCALL": 6,
    **{str(d): 7 + d for d in range(10)},
    "STAR": 17,
    "POUND": 18,
    "DPAD_UP": 19,
    "DPAD_DOWN": 20,
    "DPAD_LEFT": 21,
    "DPAD_RIGHT": 22,
    "DPAD_CENTER": 23,
    "VOLUME_UP": 24,
    "VOLUME_DOWN": 25,
    "POWER": 26,
    "CAMERA": 27,
    "CLEAR": 28,
    **{chr(ord("A") + i): 29 + i for i in range(26)},
    "COMMA": 55,
    "PERIOD": 56,
    "TAB": 61,
    "SPACE": 62,
    "ENTER": 66,
    "DEL": 67,
    "MENU": 82,
    "NOTIFICATION": 83,
    "SEARCH": 84,
    "MEDIA_PLAY_PAUSE": 85,
    "PAGE_UP": 92,
    "PAGE_DOWN": 93,
    "ESCAPE": 111,
    "FORWARD_DEL": 112,
    "MOVE_HOME": 122,
    "MOVE_END": 123,
    "VOLUME_MUTE": 164,
    "APP_SWITCH": 187,
    "BRIGHTNESS_DOWN": 220,
    "BRIGHTNESS_UP": 221,
    "SLEEP": 223,
    "WAKEUP": 224,
    "PASTE": 279,
    "COPY": 278,
    "CUT": 277,
}

MAX_KEYCODE = 316


def keycode(name: str) -> int:
    """``KEYCODE_ENTER``, ``enter`` or ``66`` to 66; ``ValueError`` for anything else."""
    text = name.strip()
    if text.isdigit():
        code = int(text)
        if 0 < code <= MAX_KEYCODE:
            return code
        raise ValueError(f"key code {code} is out of range")
    key = text.upper().removeprefix("KEYCODE_")
    if key in KEYCODES:
        return KEYCODES[key]
    raise ValueError(f"unknown Android key {name!r}")
