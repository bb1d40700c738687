"""The device driver against a physical phone or an emulator: run by operators on their hardware.

    UIS1_TEST_PHONE=1 UIS1_TEST_PHONE_SERIAL=R5CT1234 .venv/bin/pytest -m phone tests/devices

The phone must be unlocked, awake and authorised for adb (``adb devices`` says ``device``); the
adb server is the one at ``ADB_SERVER_SOCKET``/``127.0.0.1:5037``. The tests only read the
screen, press Home and Back and open Settings: nothing on the phone is changed.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from PIL import Image

from devices.adb import AdbDriver, DriverSettings
from devices.base import DeviceError

pytestmark = [pytest.mark.phone, pytest.mark.timeout(120)]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _client() -> Any:
    import adbutils

    host = os.environ.get("UIS1_TEST_ADB_HOST", "127.0.0.1")
    return adbutils.AdbClient(host=host, port=int(os.environ.get("UIS1_TEST_ADB_PORT", "5037")))


@pytest.fixture(scope="module")
def phone() -> AdbDriver:
    serial = os.environ.get("UIS1_TEST_PHONE_SERIAL")
    client = _client()
    online = [d.serial for d in client.device_list()]
    if serial is None:
        if len(online) != 1:
            pytest.fail(f"set UIS1_TEST_PHONE_SERIAL to one of the phones adb sees: {online or 'none'}")
        serial = online[0]
    if serial not in online:
        pytest.fail(f"adb does not see {serial} as a ready device (it sees {online or 'none'})")
    return AdbDriver(client, serial, DriverSettings(use_uiautomator2=False))


def test_a_screenshot_is_a_png_of_the_screen(phone: AdbDriver) -> None:
    capture = run(phone.screenshot())
    image = Image.open(io.BytesIO(capture.png))
    assert (capture.width, capture.height) == image.size == run(phone.screen_size())
    assert not capture.black, "an all-black frame: wake and unlock the phone, or the app forbids capture"


def test_raw_capture_matches_the_png(phone: AdbDriver) -> None:
    raw = AdbDriver(_client(), phone.serial, DriverSettings(use_uiautomator2=False, capture="raw"))
    a, b = run(phone.screenshot()), run(raw.screenshot())
    assert (a.width, a.height) == (b.width, b.height)


def test_info_and_hierarchy(phone: AdbDriver) -> None:
    info = run(phone.info())
    assert info.sdk is not None
    assert info.sdk >= 24
    assert info.model
    assert run(phone.hierarchy()).startswith("<?xml")


def test_home_settings_back(phone: AdbDriver) -> None:
    run(phone.key("KEYCODE_HOME"))
    assert run(phone.open_app("Settings")) == "com.android.settings"
    run(phone.key("KEYCODE_BACK"))
    run(phone.key("KEYCODE_HOME"))
    with pytest.raises(DeviceError, match="unknown Android key"):
        run(phone.key("REBOOT; rm"))
