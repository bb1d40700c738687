from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from PIL import Image, ImageStat

from devices.sim.keys import KEY_BACK
from devices.sim.phone import SimPhone
from devices.sim.shell import run
from devices.sim.ui import find


def test_hierarchy_is_uiautomator_xml_with_bounds_inside_the_screen() -> None:
    phone = SimPhone("t", width=720, height=1600)
    root = ET.fromstring(phone.hierarchy().encode())
    assert root.tag == "hierarchy"
    nodes = list(root.iter("node"))
    assert len(nodes) > 10
    for node in nodes:
        left, top, right, bottom = (
            int(v) for v in node.get("bounds", "").replace("][", ",").strip("[]").split(",")
        )
        assert 0 <= left <= right <= 720
        assert 0 <= top <= bottom <= 1600
        assert node.get("package") == "com.android.launcher3"
    assert any(n.get("content-desc") == "Settings" and n.get("clickable") == "true" for n in nodes)


def test_screenshots_show_state_changes_at_the_configured_size() -> None:
    phone = SimPhone("t", width=720, height=1600)
    home = Image.open(io.BytesIO(phone.screenshot_png()))
    assert home.size == (720, 1600)
    phone.start("com.android.settings")
    settings = Image.open(io.BytesIO(phone.screenshot_png()))
    assert settings.tobytes() != home.tobytes()
    phone.settings.dark_mode = True
    dark = Image.open(io.BytesIO(phone.screenshot_png())).convert("L")
    assert ImageStat.Stat(dark).mean[0] < 100  # mostly dark pixels


def test_text_fields_bring_up_a_keyboard_that_types() -> None:
    phone = SimPhone("t")
    phone.start("com.example.notes")
    phone.tap(*find(phone.view(), desc="New note").center)  # type: ignore[union-attr]
    phone.tap(*find(phone.view(), rid="com.example.notes:id/title").center)  # type: ignore[union-attr]
    assert find(phone.view(), rid="com.android.inputmethod.latin:id/keyboard_view") is not None
    for letter in "hi":
        phone.tap(*find(phone.view(), desc=letter).center)  # type: ignore[union-attr]
    assert phone.focused is not None
    assert phone.focused.value == "hi"
    phone.keyevent(KEY_BACK)  # the first Back hides the keyboard
    assert phone.focused is None
    assert phone.foreground.page == "edit"  # type: ignore[attr-defined]


def test_the_shell_runs_what_an_unescaped_command_line_says() -> None:
    phone = SimPhone("t")
    result = run(phone, "echo a; echo $(echo b) `echo c` && false || echo d")
    assert result.stdout == b"a\nb c\nd\n"
    assert phone.command_log == ["echo a", "echo b", "echo c", "echo b c", "false", "echo d"]
    assert run(phone, "echo 'x; y' \"$(echo z)\"").stdout == b"x; y z\n"
    refused = run(phone, "echo hi > /sdcard/x")
    assert refused.code == 2
    assert run(phone, "nosuchcmd").code == 127


def test_common_adb_commands_answer_in_the_formats_clients_parse() -> None:
    phone = SimPhone("t")
    assert run(phone, "wm size").stdout == b"Physical size: 1080x2400\n"
    assert b"package:com.android.settings\n" in run(phone, "pm list packages").stdout
    assert (
        b"Events injected: 1"
        in run(phone, "monkey -p com.example.shop -c android.intent.category.LAUNCHER 1").stdout
    )
    assert phone.foreground.package == "com.example.shop"
    assert (
        b"mCurrentFocus=Window{1a2b3c u0 com.example.shop/.ProductListActivity}"
        in run(phone, "dumpsys window").stdout
    )
    run(phone, "am start -n com.android.settings/.Settings")
    assert phone.foreground.package == "com.android.settings"
    assert run(phone, "input text 你好").code == 1  # `input text` is ASCII-only, as on a phone


def test_an_unchanged_screen_is_not_drawn_again_and_any_change_is() -> None:
    phone = SimPhone("t", width=720, height=1600)
    phone.start("com.android.settings")
    first = phone.screenshot_png()
    assert phone.screenshot_png() is first  # the same frame, not rendered again
    wifi = find(phone.view(), text="Network & internet")
    assert wifi is not None
    phone.tap(*wifi.center)  # opens the network page
    changed = phone.screenshot_png()
    assert changed != first
    assert phone.screenshot_png() is changed
    phone.screen_on = False
    off = Image.open(io.BytesIO(phone.screenshot_png())).convert("L")
    assert off.getextrema() == (0, 0)  # the black frame is its own frame, not the cached one
    phone.screen_on = True
    assert phone.screenshot_png() != off.tobytes()
