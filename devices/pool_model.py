"""What the device pool knows (``devices.pool`` acts on it): device states as adb reports them,
the pooled devices with their labels and health, leases, the events the pool publishes, and its
settings."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from devices.adb import DriverSettings
from devices.adb_server import default_server


class DeviceState(StrEnum):
    DEVICE = "device"
    OFFLINE = "offline"
    UNAUTHORIZED = "unauthorized"
    AUTHORIZING = "authorizing"
    CONNECTING = "connecting"
    RECOVERY = "recovery"
    BOOTLOADER = "bootloader"
    NO_PERMISSIONS = "no permissions"
    GONE = "gone"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, text: str) -> DeviceState:
        try:
            return cls(text.strip())
        except ValueError:
            return cls.UNKNOWN


class NoDeviceAvailable(LookupError):
    pass


class LeaseError(LookupError):
    pass


@dataclass
class PooledDevice:
    serial: str
    server: str  # host:port of the adb server that has it
    state: DeviceState = DeviceState.UNKNOWN
    server_state: DeviceState = DeviceState.UNKNOWN  # what the adb server says, before health checks
    model: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    last_seen: float = 0.0
    failures: int = 0
    lease: Lease | None = None
    next_reconnect: float = 0.0
    reconnect_attempts: int = 0

    @property
    def is_network(self) -> bool:
        host, _, port = self.serial.rpartition(":")
        return bool(host) and port.isdigit()

    @property
    def available(self) -> bool:
        return self.state is DeviceState.DEVICE and self.lease is None


@dataclass
class Lease:
    id: str
    serial: str
    holder: str
    expires_at: float

    def expired(self, now: float | None = None) -> bool:
        return (now if now is not None else time.monotonic()) >= self.expires_at


@dataclass(frozen=True)
class PoolEvent:
    kind: str  # state, leased, released, expired, connected, disconnected, reconnect_failed
    serial: str
    state: DeviceState | None = None
    detail: str = ""


@dataclass
class PoolSettings:
    servers: list[str] = field(default_factory=lambda: [default_server()])  # adb's own by default
    health_interval_s: float = 10.0
    health_timeout_s: float = 5.0
    lease_ttl_s: float = 900.0
    reconnect: bool = True
    reconnect_backoff_s: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    # Labels an operator gives devices by serial (``{"serial": {"room": "lab-2"}}``).
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    driver: DriverSettings = field(default_factory=DriverSettings)
