"""The plain adb command line works against a simulated phone, as against a real one."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.timeout(60)


def adb(adb_server, *args: str, **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def,type-arg]
    return subprocess.run(
        [adb_server.adb, "-P", str(adb_server.port), *args],
        capture_output=True,
        timeout=30,
        check=False,
        **kw,
    )


def test_devices_lists_the_phone(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    out = adb(adb_server, "devices", "-l", text=True).stdout
    assert sim.serial in out
    assert "model:Pixel_8" in out


def test_shell_input_tap_acts_on_the_phone(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    from devices.sim.ui import find

    x, y = find(sim.phone.view(), desc="Clock").center  # type: ignore[union-attr]
    result = adb(adb_server, "-s", sim.serial, "shell", "input", "tap", str(x), str(y), text=True)
    assert result.returncode == 0, result.stderr
    assert sim.phone.foreground.package == "com.google.android.deskclock"
    result = adb(adb_server, "-s", sim.serial, "shell", "wm size; exit_code_check=1; false", text=True)
    assert "Physical size: 1080x2400" in result.stdout
    assert result.returncode == 1  # shell v2 carries the exit status


def test_exec_out_screencap_is_a_png(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    result = adb(adb_server, "-s", sim.serial, "exec-out", "screencap", "-p")
    assert result.returncode == 0
    assert result.stdout.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(result.stdout) > 10_000


def test_push_and_pull_files(adb_server, sim, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "note.txt"
    src.write_bytes(b"hello from the host \x00\xff" * 5000)
    assert adb(adb_server, "-s", sim.serial, "push", str(src), "/sdcard/Download/note.txt").returncode == 0
    assert sim.phone.files["/sdcard/Download/note.txt"].data == src.read_bytes()
    dst = tmp_path / "back.txt"
    result = adb(adb_server, "-s", sim.serial, "pull", "/sdcard/Download/note.txt", str(dst), text=True)
    assert result.returncode == 0, result.stderr
    assert dst.read_bytes() == src.read_bytes()
    missing = adb(adb_server, "-s", sim.serial, "pull", "/sdcard/nope.txt", str(tmp_path / "x"), text=True)
    assert missing.returncode != 0
    assert "does not exist" in missing.stderr
