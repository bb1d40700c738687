"""The real uiautomator2 client against the simulated phone's server behind tcp:9008."""

from __future__ import annotations

import asyncio

import pytest

u2 = pytest.importorskip("uiautomator2")

pytestmark = pytest.mark.timeout(90)


def test_u2_connects_dumps_clicks_types_and_screenshots(fleet, sim) -> None:  # type: ignore[no-untyped-def]
    d = u2.connect(fleet.client().device(sim.serial))
    assert sim.phone.u2_running
    assert d.info["displayWidth"] == 1080
    d.xpath('//*[@content-desc="Messages"]').click()
    assert sim.phone.foreground.package == "com.google.android.apps.messaging"
    messages = sim.phone.app("com.google.android.apps.messaging")
    messages.open_thread("Anna Schmidt")
    sim.phone.focus(messages.compose)
    d.send_keys("你好 Anna")  # no u2 IME on this phone: the clipboard path
    assert messages.compose.value == "你好 Anna"
    assert d.screenshot().size == (1080, 2400)
    d.press("back")
    assert sim.phone.focused is None
    assert {
        "dumpWindowHierarchy",
        "click",
        "setClipboard",
        "pasteClipboard",
        "takeScreenshot",
        "pressKey",
    } <= set(sim.u2.calls)


def test_the_driver_uses_u2_for_the_hierarchy_when_allowed(fleet, sim) -> None:  # type: ignore[no-untyped-def]
    from devices.adb import AdbDriver

    driver = AdbDriver(fleet.client(), sim.serial)
    xml = asyncio.run(driver.hierarchy())
    assert 'content-desc="Settings"' in xml
    assert "dumpWindowHierarchy" in sim.u2.calls


def test_u2_ime_text_input_and_the_driver_restores_the_users_ime(fleet) -> None:  # type: ignore[no-untyped-def]
    from devices.adb import AdbDriver
    from devices.sim.phone import LATIN_IME, U2_IME

    device = fleet.add("u2-ime", unicode_ime=False)
    try:
        d = u2.connect(fleet.client().device(device.serial))
        d.set_input_ime(True)  # pushes and installs uiautomator2's helper app, selects its IME
        assert device.phone.ime == U2_IME
        device.phone.ime = LATIN_IME  # the user switches back to their keyboard
        messages = device.phone.app("com.google.android.apps.messaging")
        messages.open_thread("Anna Schmidt")
        device.phone.start(messages.package)
        device.phone.focus(messages.compose)
        calls_before = len(device.u2.calls)
        asyncio.run(AdbDriver(fleet.client(), device.serial).type_text("Grüße, Anna 🙂"))
        assert messages.compose.value == "Grüße, Anna 🙂"
        assert "setClipboard" not in device.u2.calls[calls_before:]  # typed by the IME broadcast
        assert device.phone.ime == LATIN_IME
    finally:
        fleet.devices.remove(device)
        fleet.client().disconnect(device.serial)
        device.adbd.stop()
