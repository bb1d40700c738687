"""The production driver against a simulated phone behind the real adb server."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from devices.adb import AdbDriver, DriverSettings
from devices.base import (
    AppNotFound,
    Button,
    Device,
    DeviceError,
    DeviceGone,
    DeviceTimeout,
    TextInputUnsupported,
)
from devices.sim.phone import ADB_KEYBOARD_IME, LATIN_IME

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def driver(sim, fleet):  # type: ignore[no-untyped-def]
    return AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False, command_timeout=5))


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def _focus_compose(sim) -> None:  # type: ignore[no-untyped-def]
    messages = sim.phone.app("com.google.android.apps.messaging")
    messages.open_thread("Anna Schmidt")
    sim.phone.start(messages.package)
    sim.phone.focus(messages.compose)


def test_the_driver_is_a_device(driver) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(driver, Device)


def test_each_command_is_one_connection_to_the_adb_server(driver, fleet, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """adbutils asks the server's version before every transport it opens by serial; the
    project's client asks once, so a command costs one connection, not two."""
    client = driver._client
    made = []
    original = type(client).make_connection

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(client), "make_connection", counted)
    run(driver.shell("echo warm"))  # the features and the version, asked once
    made.clear()
    for _ in range(3):
        run(driver.shell("echo hi"))
    run(driver.screenshot())
    assert len(made) == 4


def test_screenshot_is_a_png_of_the_screen_size(driver, sim) -> None:  # type: ignore[no-untyped-def]
    capture = run(driver.screenshot())
    image = Image.open(io.BytesIO(capture.png))
    assert (capture.width, capture.height) == image.size == (1080, 2400)
    assert not capture.black
    assert run(driver.screen_size()) == (1080, 2400)


def test_raw_capture_gives_the_same_pixels_as_png(sim, fleet) -> None:  # type: ignore[no-untyped-def]
    png = AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))
    raw = AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False, capture="raw"))
    a, b = run(png.screenshot()), run(raw.screenshot())
    assert (b.width, b.height) == (1080, 2400)
    assert b.image is not None
    pixels = Image.open(io.BytesIO(a.png)).convert("RGB").tobytes()  # the PNG path decodes nothing here
    assert b.image.tobytes() == pixels == Image.open(io.BytesIO(b.png)).convert("RGB").tobytes()
    sim.phone.faults.display_warning = True  # a warning printed before the frame is skipped
    assert run(raw.screenshot()).image.tobytes() == pixels  # type: ignore[union-attr]
    sim.phone.faults.display_warning = False
    sim.phone.faults.black_frames = True
    assert run(raw.screenshot()).black


def test_a_frame_that_is_not_rgba_is_refused_with_advice() -> None:
    from devices.frames import decode_raw

    with pytest.raises(DeviceError, match=r"no RGBA_8888 frame .*capture='png'"):
        decode_raw("sim-1", b"\x10\x00\x00\x00\x10\x00\x00\x00\x04\x00\x00\x00" + bytes(16 * 16 * 2), "")


def test_tap_opens_the_app_under_the_finger(driver, sim) -> None:  # type: ignore[no-untyped-def]
    from devices.sim.ui import find

    icon = find(sim.phone.view(), desc="Settings")
    assert icon is not None
    run(driver.tap(*icon.center))
    assert sim.phone.foreground.package == "com.android.settings"
    assert run(driver.foreground_app()) == "com.android.settings"
    run(driver.press(Button.BACK))
    assert sim.phone.foreground.package == "com.android.launcher3"


def test_swipe_scrolls_and_long_press_opens_a_dialog(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.start("com.android.contacts")
    first_visible = lambda: next(v.text for v in sim.phone.view().walk() if v.rid.endswith("contact_name"))  # noqa: E731
    before = first_visible()
    run(driver.swipe(540, 1800, 540, 600, 0.3))
    assert first_visible() != before
    sim.phone.start("com.google.android.deskclock")
    run(driver.long_press(540, 96 + 168 + 84, 1.0))
    assert sim.phone.dialog is not None
    assert sim.phone.dialog.title == "Delete alarm?"


@pytest.mark.parametrize(
    "text", ["Hello Anna", "on my way; rm -rf / `reboot` $(id) 'x' \"y\" %s 100%", "two\nlines"]
)
def test_ascii_text_arrives_literally(driver, sim, text: str) -> None:  # type: ignore[no-untyped-def]
    _focus_compose(sim)
    run(driver.type_text(text))
    assert sim.phone.focused is not None or "\n" in text
    messages = sim.phone.app("com.google.android.apps.messaging")
    if "\n" in text:  # Enter sends the first line in a chat box
        assert messages.last_sent("Anna Schmidt") == "two"
        assert messages.compose.value == "lines"
    else:
        assert messages.compose.value == text
    executed = [c.split()[0] for c in sim.phone.command_log]
    assert set(executed) == {"input"}, sim.phone.command_log


def test_unicode_goes_through_adb_keyboard_and_the_ime_is_restored(driver, sim) -> None:  # type: ignore[no-untyped-def]
    _focus_compose(sim)
    run(driver.type_text("你好 Anna 🚗 — ok"))
    messages = sim.phone.app("com.google.android.apps.messaging")
    assert messages.compose.value == "你好 Anna 🚗 — ok"
    assert sim.phone.ime == LATIN_IME
    assert any(c.startswith(f"ime set {ADB_KEYBOARD_IME}") for c in sim.phone.command_log)


def test_unicode_without_a_unicode_ime_is_refused_clearly(fleet) -> None:  # type: ignore[no-untyped-def]
    device = fleet.add("no-ime", unicode_ime=False)
    try:
        driver = AdbDriver(fleet.client(), device.serial, DriverSettings(use_uiautomator2=False))
        with pytest.raises(TextInputUnsupported, match="ADBKeyBoard"):
            run(driver.type_text("你好"))
        # With uiautomator2 allowed, its clipboard input types it.
        _focus_compose(device)
        run(AdbDriver(fleet.client(), device.serial).type_text("你好 Anna"))
        assert device.phone.app("com.google.android.apps.messaging").compose.value == "你好 Anna"
    finally:
        fleet.devices.remove(device)
        fleet.client().disconnect(device.serial)
        device.adbd.stop()


def test_keys_by_name_and_bad_keys(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.start("com.android.settings")
    run(driver.key("KEYCODE_HOME"))
    assert sim.phone.foreground.package == "com.android.launcher3"
    with pytest.raises(DeviceError, match="unknown Android key"):
        run(driver.key("REBOOT; rm"))


def test_open_app_resolves_labels_and_reports_unknown_apps(driver, sim) -> None:  # type: ignore[no-untyped-def]
    assert run(driver.open_app("Clock")) == "com.google.android.deskclock"
    assert sim.phone.foreground.package == "com.google.android.deskclock"
    assert run(driver.open_app("shop")) == "com.example.shop"
    assert run(driver.open_app("com.android.contacts")) == "com.android.contacts"
    with pytest.raises(AppNotFound, match="Zoho"):
        run(driver.open_app("Zoho Meeting"))


def test_hierarchy_and_info(driver, sim) -> None:  # type: ignore[no-untyped-def]
    xml = run(driver.hierarchy())
    assert xml.startswith("<?xml")
    assert 'content-desc="Settings"' in xml
    info = run(driver.info())
    assert info.model == "Pixel 8"
    assert info.sdk == 34


def test_black_frames_are_flagged(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.faults.black_frames = True
    capture = run(driver.screenshot())
    assert capture.black
    assert capture.note == "the app forbids screenshots"
    sim.phone.faults.black_frames = False
    sim.phone.keyevent(223)  # screen off
    capture = run(driver.screenshot())
    assert capture.black
    assert capture.note == "the screen is off"


def test_a_hung_command_times_out(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.faults.hang = {"screencap"}
    driver.settings.screenshot_timeout = 1.0
    with pytest.raises(DeviceTimeout):
        run(driver.screenshot())


def test_a_stream_cut_mid_screenshot_is_a_device_error(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.faults.drop_mid_stream = True
    with pytest.raises(DeviceError):
        run(driver.screenshot())
    sim.phone.faults.clear()


def test_a_pulled_phone_gives_device_gone(driver, sim, fleet) -> None:  # type: ignore[no-untyped-def]
    sim.phone.faults.gone = True
    sim.adbd.drop_connections()
    error = None
    for _ in range(20):  # the server notices the dead socket within moments
        try:
            run(driver.tap(1, 1))
        except DeviceError as exc:
            error = exc
            break
        run(asyncio.sleep(0.1))
    assert isinstance(error, DeviceGone)
    sim.phone.faults.gone = False


def test_coordinates_must_be_pixels(driver) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="integer pixels"):
        run(driver.tap(0.5, 0.5))  # type: ignore[arg-type]


def test_a_multi_display_warning_before_the_png_is_stripped(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.faults.display_warning = True
    capture = run(driver.screenshot())
    assert capture.png.startswith(b"\x89PNG")
    assert (capture.width, capture.height) == (1080, 2400)


def test_a_wedged_phone_times_out_and_a_slow_one_is_waited_for(driver, sim) -> None:  # type: ignore[no-untyped-def]
    driver.settings.command_timeout = driver.settings.screenshot_timeout = 1.0
    sim.phone.faults.delay_s = 0.3
    assert run(driver.screen_size()) == (1080, 2400)
    sim.phone.faults.delay_s = 3.0
    for call in (driver.foreground_app, driver.screenshot, lambda: driver.tap(10, 10)):
        with pytest.raises(DeviceTimeout, match="did not answer"):  # a timeout, said as one
            run(call())
    sim.phone.faults.delay_s = 0.0
    sim.phone.faults.offline = True
    with pytest.raises((DeviceTimeout, DeviceGone)):
        run(driver.tap(10, 10))
    sim.phone.faults.offline = False


def test_a_large_frame_is_read_without_decoding_and_a_small_one_is_checked(driver, sim) -> None:  # type: ignore[no-untyped-def]
    sim.phone.wallpaper = True  # the home screen over a photo: a 2 MB PNG, as on a real phone
    sim.phone.home()
    try:
        capture = run(driver.screenshot())
        assert len(capture.png) > 1_500_000
        assert (capture.width, capture.height) == Image.open(io.BytesIO(capture.png)).size == (1080, 2400)
        assert capture.image is None  # nothing decoded: the PNG's header gave its size
        assert not capture.black
    finally:
        sim.phone.wallpaper = False
    flat = run(driver.screenshot())
    assert flat.image is None  # an app screen is too large to be all black: not decoded either


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_an_all_black_frame_is_always_decoded_and_checked(mode: str, level: int) -> None:
    from devices.frames import maybe_black

    buf = io.BytesIO()
    Image.new(mode, (1080, 2400), "black").save(buf, format="PNG", compress_level=level)
    assert maybe_black(buf.getvalue(), 1080, 2400)


def test_the_largest_all_black_png_a_fast_encoder_makes_is_still_checked() -> None:
    """No PNG filters and zlib's fastest level: the largest black frame measured (56.8 KB)."""
    import struct
    import zlib

    from devices.frames import maybe_black

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    width, height = 1080, 2400
    rows = (b"\x00" + b"\x00\x00\x00\xff" * width) * height  # filter "none", opaque black
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows, 1))
        + chunk(b"IEND", b"")
    )
    assert Image.open(io.BytesIO(png)).convert("RGB").getbbox() is None  # a valid, all-black PNG
    assert len(png) > 50_000
    assert maybe_black(png, width, height)


def test_a_png_cut_short_is_a_device_error_before_anything_is_decoded(driver, sim) -> None:  # type: ignore[no-untyped-def]
    from devices.frames import check_png

    whole = run(driver.screenshot()).png
    with pytest.raises(DeviceError, match="no end"):
        check_png(driver.serial, whole[: len(whole) // 2], "")
    with pytest.raises(DeviceError, match="no header"):
        check_png(driver.serial, whole[:20], "")
    assert check_png(driver.serial, whole, "")[2] == (1080, 2400)


def test_a_stream_closed_at_its_deadline_is_reported_as_the_timeout_it_was(driver) -> None:  # type: ignore[no-untyped-def]
    """A read that gives up at its deadline can surface as a closed stream (EOFError): said as a
    timeout, not as "connection lost"; a stream closed early is still a lost connection."""
    import time

    def late() -> None:
        time.sleep(0.6)
        raise EOFError("Expected 5 bytes, got 0")

    def early() -> None:
        raise EOFError("Expected 5 bytes, got 0")

    with pytest.raises(DeviceTimeout, match=r"did not answer within 0\.5 s"):
        run(driver._call(late, 0.5))
    with pytest.raises(DeviceGone, match="connection lost"):
        run(driver._call(early, 0.5))
