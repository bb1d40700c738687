"""The device pool: every phone on one or more adb servers, their states, leases and health.

- **Discovery**: each adb server (``host:port``, remote ones included) is asked for its devices
  (``devices -l``); states are ``device``, ``offline``, ``unauthorized`` and the like, plus ``gone``
  for a device its server no longer lists.
- **Leases**: one episode per device. A lease names its holder, expires unless renewed, and is
  chosen by serial, model or labels. Devices that are not ``device`` are never leased.
- **Health**: a periodic check lists the servers and runs a trivial command on every leasable
  device; one that fails is marked offline. Network devices (``host:port`` serials) that drop are
  reconnected with ``adb connect``, with backoff.
- **Events**: state changes, leases and reconnects are published to subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

import adbutils
from adbutils.errors import AdbError

from devices.adb import AdbDriver
from devices.adb_server import AdbClient, server_answers, split_server
from devices.base import DeviceError, DeviceGone
from devices.pool_model import (
    DeviceState,
    Lease,
    LeaseError,
    NoDeviceAvailable,
    PooledDevice,
    PoolEvent,
    PoolSettings,
)

__all__ = [
    "DevicePool",
    "DeviceState",
    "Lease",
    "LeaseError",
    "NoDeviceAvailable",
    "PoolEvent",
    "PoolSettings",
    "PooledDevice",
]

log = logging.getLogger(__name__)


class DevicePool:
    def __init__(
        self, settings: PoolSettings | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or PoolSettings()
        self._clock = clock
        self._clients: dict[str, adbutils.AdbClient] = {}
        for address in self.settings.servers:
            host, port = split_server(address)
            self._clients[address] = AdbClient(
                host=host, port=port, socket_timeout=self.settings.health_timeout_s
            )
        self.devices: dict[str, PooledDevice] = {}
        self.unreachable: set[str] = set()  # adb servers that did not answer the last refresh
        self._subscribers: list[asyncio.Queue[PoolEvent]] = []
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition(self._lock)
        self._task: asyncio.Task[None] | None = None

    # -- events -----------------------------------------------------------------------------------
    def subscribe(self, maxsize: int = 1000) -> asyncio.Queue[PoolEvent]:
        queue: asyncio.Queue[PoolEvent] = asyncio.Queue(maxsize)
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[PoolEvent]) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(queue)

    def _emit(self, event: PoolEvent) -> None:
        log.info("device %s: %s %s %s", event.serial, event.kind, event.state or "", event.detail)
        for queue in self._subscribers:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    def _set_state(self, device: PooledDevice, state: DeviceState, detail: str = "") -> None:
        if device.state is not state:
            device.state = state
            self._emit(PoolEvent("state", device.serial, state, detail))

    # -- discovery ------------------------------------------------------------------------------
    def client_for(self, server: str | None = None) -> tuple[str, adbutils.AdbClient]:
        address = server or self.settings.servers[0]
        client = self._clients.get(address)
        if client is None:
            raise ValueError(f"unknown adb server {address!r}; configured: {', '.join(self._clients)}")
        return address, client

    async def refresh(self) -> None:
        """List every server's devices and update states (a missing device becomes ``gone``)."""
        listings: dict[str, list[Any] | None] = {}
        for address, client in self._clients.items():
            host, port = split_server(address)
            # Said once when a server stops answering (and once when it is back), not every refresh.
            said = address in self.unreachable
            if not await asyncio.to_thread(server_answers, host, port, self.settings.health_timeout_s):
                if not said:
                    log.warning("adb server %s does not answer", address)
                listings[address] = None
                continue
            try:
                listings[address] = await asyncio.wait_for(
                    asyncio.to_thread(client.list, extended=True), self.settings.health_timeout_s + 1
                )
            except (AdbError, OSError, TimeoutError) as exc:
                if not said:
                    log.warning("adb server %s unreachable: %s", address, exc)
                listings[address] = None
                continue
            if said:
                log.info("adb server %s answers again", address)
        async with self._changed:
            self.unreachable = {a for a, entries in listings.items() if entries is None}
            now = self._clock()
            seen: set[str] = set()
            for address, entries in listings.items():
                if entries is None:
                    for device in self.devices.values():
                        if device.server == address:
                            self._set_state(device, DeviceState.UNKNOWN, "adb server unreachable")
                    continue
                for entry in entries:
                    seen.add(entry.serial)
                    if entry.serial not in self.devices:
                        fresh = PooledDevice(entry.serial, address)
                        fresh.labels = dict(self.settings.labels.get(entry.serial, {}))
                        self.devices[entry.serial] = fresh
                    device = self.devices[entry.serial]
                    device.server = address
                    device.model = entry.tags.get("model", device.model).replace("_", " ")
                    device.last_seen = now
                    device.server_state = DeviceState.parse(entry.state)
                    # A device that failed its last health check stays offline until one passes.
                    state = device.server_state
                    if state is DeviceState.DEVICE and device.failures:
                        state = DeviceState.OFFLINE
                    self._set_state(device, state)
            for device in self.devices.values():
                if device.serial not in seen and listings.get(device.server) is not None:
                    device.server_state = DeviceState.GONE
                    self._set_state(device, DeviceState.GONE, "no longer listed by its adb server")
            self._expire_leases(now)
            self._changed.notify_all()

    # -- network devices -------------------------------------------------------------------------
    async def connect(self, address: str, server: str | None = None) -> PooledDevice:
        """``adb connect`` a network device (wireless debugging, an emulator on another host)."""
        server_address, client = self.client_for(server)
        host, port = split_server(server_address)
        if not await asyncio.to_thread(server_answers, host, port, self.settings.health_timeout_s):
            raise DeviceGone(address, f"the adb server at {server_address} does not answer")
        try:
            message = await asyncio.wait_for(
                asyncio.to_thread(client.connect, address, timeout=self.settings.health_timeout_s),
                self.settings.health_timeout_s + 2,
            )
        except (AdbError, OSError, TimeoutError) as exc:
            raise DeviceGone(address, f"adb connect failed: {exc}") from exc
        # adb answers OKAY even when it could not connect: the message says which.
        if not str(message).startswith(("connected to", "already connected to")):
            raise DeviceGone(address, str(message).strip() or "adb connect failed")
        self._emit(PoolEvent("connected", address, detail=str(message).strip()))
        await self._wait_listed(address)
        async with self._lock:
            device = self.devices.get(address)
            if device is None:
                raise DeviceGone(address, "connected, but the adb server does not list the device")
            device.next_reconnect = 0.0
        return device

    async def _wait_listed(self, serial: str, timeout: float = 10.0) -> None:
        """Refresh until the server lists ``serial`` as ready, or ``timeout`` passes."""
        deadline = self._clock() + timeout
        while True:
            await self.refresh()
            device = self.devices.get(serial)
            if (device is not None and device.state is DeviceState.DEVICE) or self._clock() >= deadline:
                return
            await asyncio.sleep(0.2)

    async def disconnect(self, address: str) -> None:
        device = self.devices.get(address)
        _, client = self.client_for(device.server if device else None)
        await asyncio.to_thread(client.disconnect, address)
        async with self._lock:
            if device is not None:
                self._set_state(device, DeviceState.GONE, "disconnected")
                device.next_reconnect = float("inf")  # an explicit disconnect is not reconnected
        self._emit(PoolEvent("disconnected", address))

    # -- leases ---------------------------------------------------------------------------------
    def _matches(
        self, device: PooledDevice, serial: str | None, model: str | None, labels: Mapping[str, str]
    ) -> bool:
        if serial is not None and device.serial != serial:
            return False
        if model is not None and model.lower() not in device.model.lower():
            return False
        return all(device.labels.get(k) == v for k, v in labels.items())

    def known_match(self, serial: str | None, model: str | None, labels: Mapping[str, str]) -> bool | None:
        """Whether a known device (free, leased or offline) matches; None when it cannot be told,
        because an adb server did not answer the last refresh."""
        if any(self._matches(d, serial, model, labels) for d in self.devices.values()):
            return True
        return None if self.unreachable else False

    async def acquire(
        self,
        *,
        holder: str,
        serial: str | None = None,
        model: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_s: float | None = None,
        wait_s: float = 0.0,
        exclude: Collection[str] = (),
    ) -> Lease:
        """Lease a matching, healthy, free device; wait up to ``wait_s`` for one to free up.

        ``exclude`` names serials to pass over (held elsewhere, e.g. by another service replica).
        """
        wanted = labels or {}
        deadline = self._clock() + wait_s
        async with self._changed:
            while True:
                self._expire_leases(self._clock())
                candidates = [d for d in self.devices.values() if self._matches(d, serial, model, wanted)]
                free = sorted(
                    (d for d in candidates if d.available and d.serial not in exclude),
                    key=lambda d: (d.failures, d.serial),
                )
                if free:
                    device = free[0]
                    lease = Lease(
                        uuid.uuid4().hex,
                        device.serial,
                        holder,
                        self._clock() + (ttl_s or self.settings.lease_ttl_s),
                    )
                    device.lease = lease
                    self._emit(PoolEvent("leased", device.serial, device.state, holder))
                    return lease
                remaining = deadline - self._clock()
                if remaining <= 0:
                    if not candidates:
                        raise NoDeviceAvailable(_describe("no device matches", serial, model, wanted))
                    states = ", ".join(f"{d.serial}: {'leased' if d.lease else d.state}" for d in candidates)
                    raise NoDeviceAvailable(f"no matching device is free ({states})")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    def _lease(self, lease_id: str) -> PooledDevice:
        for device in self.devices.values():
            if device.lease is not None and device.lease.id == lease_id:
                return device
        raise LeaseError(f"no active lease {lease_id}")

    async def renew(self, lease_id: str, ttl_s: float | None = None) -> Lease:
        async with self._lock:
            device = self._lease(lease_id)
            assert device.lease is not None
            device.lease.expires_at = self._clock() + (ttl_s or self.settings.lease_ttl_s)
            return device.lease

    async def release(self, lease_id: str) -> None:
        async with self._changed:
            try:
                device = self._lease(lease_id)
            except LeaseError:
                return  # already released or expired
            holder = device.lease.holder if device.lease else ""
            device.lease = None
            self._emit(PoolEvent("released", device.serial, device.state, holder))
            self._changed.notify_all()

    def _expire_leases(self, now: float) -> None:
        for device in self.devices.values():
            if device.lease is not None and device.lease.expired(now):
                self._emit(PoolEvent("expired", device.serial, device.state, device.lease.holder))
                device.lease = None

    def driver(self, lease: Lease) -> AdbDriver:
        """The driver for a leased device (the lease must still be held)."""
        device = self._lease(lease.id)
        _, client = self.client_for(device.server)
        return AdbDriver(client, device.serial, self.settings.driver)

    # -- health ---------------------------------------------------------------------------------
    async def check_health(self) -> None:
        """One round: list servers, probe leasable devices, reconnect dropped network devices."""
        await self.refresh()
        for device in list(self.devices.values()):
            if device.server_state is DeviceState.DEVICE:
                await self._probe(device)
                # A wedged transport is dropped and connected anew, but never under a lease: a
                # slow phone fails the probe while an episode's command is still running on that
                # transport, and tearing it down would cut the command off (its own timeout and
                # errors tell the episode what happened).
                if (
                    self.settings.reconnect
                    and device.is_network
                    and device.failures >= 2
                    and device.lease is None
                ):
                    await self._reconnect(device)
            elif (
                self.settings.reconnect
                and device.is_network
                and device.state in (DeviceState.GONE, DeviceState.OFFLINE)
            ):
                await self._reconnect(device)

    async def _probe(self, device: PooledDevice) -> None:
        _, client = self.client_for(device.server)
        driver = AdbDriver(client, device.serial, self.settings.driver)
        try:
            out = await driver.shell("echo uis1-ok", timeout=self.settings.health_timeout_s)
            ok = "uis1-ok" in out
        except DeviceError as exc:
            ok, out = False, exc.message
        async with self._lock:
            if ok:
                device.failures = 0
                device.reconnect_attempts = 0
                self._set_state(device, DeviceState.DEVICE, "health check passed")
            else:
                device.failures += 1
                self._set_state(device, DeviceState.OFFLINE, f"health check failed: {out.strip()[:200]}")

    async def _reconnect(self, device: PooledDevice) -> None:
        now = self._clock()
        if now < device.next_reconnect:
            return
        backoff = self.settings.reconnect_backoff_s
        delay = backoff[min(device.reconnect_attempts, len(backoff) - 1)]
        device.reconnect_attempts += 1
        device.next_reconnect = now + delay
        _, client = self.client_for(device.server)
        with contextlib.suppress(AdbError, OSError, TimeoutError):
            # A wedged transport must be dropped before a new connect can replace it.
            await asyncio.wait_for(
                asyncio.to_thread(client.disconnect, device.serial), self.settings.health_timeout_s
            )
        try:
            await self.connect(device.serial, device.server)
        except DeviceGone as exc:
            self._emit(PoolEvent("reconnect_failed", device.serial, device.state, exc.message))
            return
        if device.state is DeviceState.DEVICE:
            device.reconnect_attempts = 0
            device.next_reconnect = 0.0

    async def start(self) -> None:
        """Discover devices now, then check health every ``health_interval_s`` in the background."""
        await self.check_health()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="device-pool-health")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval_s)
            try:
                await self.check_health()
            except Exception:
                log.exception("device health check failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def _describe(prefix: str, serial: str | None, model: str | None, labels: Mapping[str, str]) -> str:
    parts = [f"serial={serial}" if serial else "", f"model~{model}" if model else ""]
    parts += [f"{k}={v}" for k, v in labels.items()]
    wanted = ", ".join(p for p in parts if p)
    return f"{prefix} ({wanted})" if wanted else f"{prefix}: the pool is empty"
