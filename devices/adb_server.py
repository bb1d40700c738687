"""Starting and stopping a local adb server, finding the ``adb`` binary, and the client for it.

The adbutils wheel ships a current ``adb``; a system one (``apt install adb``) works as well.
Servers on other hosts are not started here: point the pool at their ``host:port``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import adbutils

DEFAULT_PORT = 5037


class AdbClient(adbutils.AdbClient):  # type: ignore[misc]  # adbutils ships no types
    """adbutils' client, asking the adb server's version once. adbutils asks it before opening a
    transport by serial (to choose between the commands of servers before and after 1.0.41), on a
    connection of its own: two connections to the server for every command. Only servers older
    than 1.0.41 (2018) answer differently, so a server restarted under the client is still right."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._version: int | None = None

    def server_version(self) -> int:
        if self._version is None:
            self._version = int(super().server_version())
        return self._version


def default_server() -> str:
    """The adb server adb itself would use, as ``host:port``: ``ADB_SERVER_SOCKET`` (``tcp:HOST:PORT``
    or ``tcp:PORT``), else ``ANDROID_ADB_SERVER_ADDRESS`` and ``ANDROID_ADB_SERVER_PORT``, else
    127.0.0.1:5037."""
    socket_spec = os.environ.get("ADB_SERVER_SOCKET", "")
    if socket_spec.startswith("tcp:"):
        host, _, port = socket_spec.removeprefix("tcp:").rpartition(":")
        return f"{host or '127.0.0.1'}:{port}"
    host = os.environ.get("ANDROID_ADB_SERVER_ADDRESS") or "127.0.0.1"
    return f"{host}:{os.environ.get('ANDROID_ADB_SERVER_PORT') or DEFAULT_PORT}"


def default_port() -> int:
    """The port of adb's default server (see ``default_server``)."""
    return split_server(default_server())[1]


def split_server(address: str) -> tuple[str, int]:
    """``host:port`` of an adb server; anything else is a ValueError that says so (a port from
    ``ANDROID_ADB_SERVER_PORT`` or ``ADB_SERVER_SOCKET`` included)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"an adb server is host:port, got {address!r} "
            "(check --server/--adb-server, ANDROID_ADB_SERVER_PORT and ADB_SERVER_SOCKET)"
        )
    return host, int(port)


def find_adb(explicit: str | None = None) -> str:
    """The adb binary: ``explicit``, else the one in the adbutils wheel, else ``adb`` on PATH."""
    if explicit:
        return explicit
    bundled = Path(adbutils.__file__).parent / "binaries" / "adb"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    found = shutil.which("adb")
    if found is None:
        raise FileNotFoundError("no adb binary: install the adbutils wheel or `apt install adb`")
    return found


def server_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether an adb server answers ``host:version`` at ``host:port``.

    Probed with a plain socket: adbutils, finding nothing there, would start a server of its own
    on the default port, which is never what a caller asking about another server wants.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"000chost:version")
            return sock.recv(4) == b"OKAY"
    except OSError:
        return False


class AdbServer:
    """A local adb server on ``port`` (loopback only, as adb listens by default)."""

    def __init__(self, port: int = DEFAULT_PORT, adb_path: str | None = None) -> None:
        self.port = port
        self.adb = find_adb(adb_path)

    def _run(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.adb, "-P", str(self.port), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def client(self, socket_timeout: float = 10.0) -> AdbClient:
        return AdbClient(host="127.0.0.1", port=self.port, socket_timeout=socket_timeout)

    def is_running(self) -> bool:
        return server_answers("127.0.0.1", self.port)

    def start(self, timeout: float = 20.0) -> AdbServer:
        """Start the server (a no-op if one already answers) and wait until it does."""
        if self.is_running():
            return self
        result = self._run("start-server", timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_running():
                return self
            time.sleep(0.1)
        raise RuntimeError(
            f"adb server on port {self.port} did not start: {result.stderr.strip() or result.stdout.strip()}"
        )

    def stop(self) -> None:
        if self.is_running():
            self._run("kill-server", timeout=10)

    def __enter__(self) -> AdbServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
