"""Running simulated phones behind a real adb server: what tests, the demo and ``uis1 sim`` use.

Each phone gets its own fake adbd on a free loopback port (never 5555-5585, which the adb server
scans for emulators on its own) and is attached with ``adb connect``, so its serial is
``127.0.0.1:PORT`` exactly like a phone in wireless debugging.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import adbutils

from devices.adb_server import AdbServer
from devices.ports import EMULATOR_PORTS
from devices.sim.adbd import AdbdServer
from devices.sim.display import STANDARD, DisplayProfile
from devices.sim.phone import SimPhone
from devices.sim.u2 import U2Server


@dataclass
class SimDevice:
    phone: SimPhone
    adbd: AdbdServer
    u2: U2Server

    @property
    def serial(self) -> str:
        return self.adbd.address


@dataclass
class SimFleet:
    """``count`` simulated phones attached to the adb server on ``server.port``."""

    server: AdbServer
    devices: list[SimDevice] = field(default_factory=list)

    def add(
        self,
        name: str | None = None,
        *,
        width: int = 1080,
        height: int = 2400,
        unicode_ime: bool = True,
        display: DisplayProfile = STANDARD,
        wallpaper: bool = False,
    ) -> SimDevice:
        phone = SimPhone(
            name or f"sim-{len(self.devices) + 1}",
            width=width,
            height=height,
            unicode_ime=unicode_ime,
            display=display,
            wallpaper=wallpaper,
        )
        adbd = self._start_adbd(phone)
        u2 = U2Server(phone)
        adbd.tcp_handlers[u2.PORT] = u2
        device = SimDevice(phone, adbd, u2)
        self.attach(device)
        self.devices.append(device)
        return device

    @staticmethod
    def _start_adbd(phone: SimPhone) -> AdbdServer:
        for _ in range(20):
            adbd = AdbdServer(phone).start()
            if adbd.port not in EMULATOR_PORTS:
                return adbd
            adbd.stop()
        raise RuntimeError("could not find a free port outside the emulator range")

    def client(self) -> adbutils.AdbClient:
        return self.server.client()

    def attach(self, device: SimDevice, timeout: float = 15.0) -> None:
        """``adb connect`` the phone and wait until the server lists it as ``device``."""
        client = self.client()
        message = client.connect(device.serial, timeout=timeout)
        if "connected to" not in message:
            raise RuntimeError(f"adb connect {device.serial}: {message}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = {d.serial: d.state for d in client.list()}
            if states.get(device.serial) == "device":
                return
            time.sleep(0.05)
        raise RuntimeError(f"{device.serial} did not come online")

    def close(self) -> None:
        client = self.client()
        for device in self.devices:
            with contextlib.suppress(Exception):  # the server may already be gone
                client.disconnect(device.serial)
            device.adbd.stop()
        self.devices.clear()

    def __enter__(self) -> SimFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
