"""Free loopback ports for the servers the project starts: simulated phones, the demo's service,
the evaluation's adb server, test and benchmark servers."""

from __future__ import annotations

import socket

# The adb server scans these for emulators on its own: a server of ours there would be taken for one.
EMULATOR_PORTS = range(5554, 5586)


def free_port(host: str = "127.0.0.1") -> int:
    """A port no one listens on now (another process may still take it before it is bound)."""
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in EMULATOR_PORTS:
            return port
