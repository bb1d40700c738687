"""adb's own environment variables are honoured, and no adb server is started unasked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from devices.adb_server import default_server
from devices.ports import free_port


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "127.0.0.1:5037"),
        ({"ANDROID_ADB_SERVER_PORT": "5555"}, "127.0.0.1:5555"),
        ({"ANDROID_ADB_SERVER_ADDRESS": "10.0.0.2", "ANDROID_ADB_SERVER_PORT": "5038"}, "10.0.0.2:5038"),
        ({"ADB_SERVER_SOCKET": "tcp:adbhost:5039", "ANDROID_ADB_SERVER_PORT": "1"}, "adbhost:5039"),
        ({"ADB_SERVER_SOCKET": "tcp:5040"}, "127.0.0.1:5040"),
    ],
)
def test_the_default_server_is_adbs_own(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name in ("ADB_SERVER_SOCKET", "ANDROID_ADB_SERVER_ADDRESS", "ANDROID_ADB_SERVER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_server() == expected


def test_uis1_run_without_an_adb_server_says_so_and_starts_none(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "ANDROID_ADB_SERVER_PORT": str(port),
        "ANDROID_SERIAL": "emulator-5554",
        "UIS1_STORE__URL": f"sqlite:///{tmp_path / 'store.db'}",
    }
    uis1 = Path(sys.executable).parent / "uis1"
    result = subprocess.run(
        [str(uis1), "run", "Turn on Wi-Fi"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert f"no adb server answers at 127.0.0.1:{port}" in result.stderr
    assert "--start-adb" in result.stderr
    assert "Traceback" not in result.stderr
    with socket.socket() as sock:  # nothing was started on adb's port
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_devices_list_speaks_json_and_says_where_it_looked(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    import json

    uis1 = Path(sys.executable).parent / "uis1"
    env = {
        **os.environ,
        "ANDROID_ADB_SERVER_PORT": str(adb_server.port),
    }  # adb's own variable picks the server
    listed = subprocess.run(
        [str(uis1), "devices", "list", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    rows = {row["serial"]: row for row in json.loads(listed.stdout)}
    assert rows[sim.serial]["state"] == "device"
    assert rows[sim.serial]["server"] == f"127.0.0.1:{adb_server.port}"


@pytest.mark.parametrize("command", [("models", "list"), ("jobs", "list")])
def test_empty_lists_say_so_and_json_is_an_empty_list(tmp_path: Path, command: tuple[str, ...]) -> None:
    uis1 = Path(sys.executable).parent / "uis1"
    env = {**os.environ, "UIS1_STORE__URL": f"sqlite:///{tmp_path / 'store.db'}"}
    plain = subprocess.run([str(uis1), *command], env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0
    assert plain.stderr.startswith("no ")
    as_json = subprocess.run(
        [str(uis1), *command, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert as_json.stdout.strip() == "[]"


def test_uis1_run_for_a_device_the_server_does_not_list_says_so_and_records_nothing(
    adb_server, sim, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "UIS1_STORE__URL": f"sqlite:///{tmp_path / 'store.db'}"}
    uis1 = Path(sys.executable).parent / "uis1"
    result = subprocess.run(
        [str(uis1), "run", "--device", "nosuch-5554", "--adb-server", f"127.0.0.1:{adb_server.port}", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"error: no device nosuch-5554 on the adb server at 127.0.0.1:{adb_server.port} "
        "(`uis1 devices list` shows the connected ones)"
    )
    listed = subprocess.run(
        [str(uis1), "trajectories", "list", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.stdout.strip() == "[]"  # no episode was started, so none recorded as an error
