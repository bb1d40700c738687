"""The device pool against the real adb server with simulated phones."""

from __future__ import annotations

import asyncio

import pytest

from devices.base import DeviceError, DeviceGone
from devices.pool import DevicePool, DeviceState, LeaseError, NoDeviceAvailable, PoolSettings

pytestmark = pytest.mark.timeout(90)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_pool(adb_server, clock=None, **kw) -> DevicePool:  # type: ignore[no-untyped-def]
    settings = PoolSettings(
        servers=[f"127.0.0.1:{adb_server.port}"], health_timeout_s=2.0, reconnect_backoff_s=(0.0,), **kw
    )
    return DevicePool(settings, clock=clock) if clock else DevicePool(settings)


def test_discovery_lists_simulated_phones_with_model(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    pool = make_pool(adb_server, labels={sim.serial: {"room": "lab"}})
    asyncio.run(pool.refresh())
    device = pool.devices[sim.serial]
    assert device.state is DeviceState.DEVICE
    assert device.model == "Pixel 8"
    assert device.labels == {"room": "lab"}
    assert device.is_network


def test_leases_are_exclusive_and_selectable(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        pool = make_pool(adb_server, labels={sim.serial: {"room": "lab"}})
        events = pool.subscribe()
        await pool.refresh()
        lease = await pool.acquire(holder="episode-1", serial=sim.serial)
        assert lease.serial == sim.serial
        with pytest.raises(NoDeviceAvailable, match="leased"):
            await pool.acquire(holder="episode-2", serial=sim.serial)
        with pytest.raises(NoDeviceAvailable, match="no device matches"):
            await pool.acquire(holder="x", model="Galaxy")
        await pool.release(lease.id)
        again = await pool.acquire(holder="episode-2", model="pixel", labels={"room": "lab"})
        driver = pool.driver(again)
        assert await driver.foreground_app() == "com.android.launcher3"
        await pool.release(again.id)
        with pytest.raises(LeaseError):
            pool.driver(again)
        kinds = [e.kind for e in _drain(events)]
        assert kinds.count("leased") == 2
        assert kinds.count("released") == 2

    asyncio.run(scenario())


def test_a_waiting_acquire_gets_the_device_when_it_is_released(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        pool = make_pool(adb_server)
        await pool.refresh()
        first = await pool.acquire(holder="a", serial=sim.serial)
        waiter = asyncio.create_task(pool.acquire(holder="b", serial=sim.serial, wait_s=5))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        await pool.release(first.id)
        second = await asyncio.wait_for(waiter, 5)
        assert second.holder == "b"

    asyncio.run(scenario())


def test_leases_expire_unless_renewed(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        clock = FakeClock()
        pool = make_pool(adb_server, clock=clock)
        await pool.refresh()
        lease = await pool.acquire(holder="a", serial=sim.serial, ttl_s=60)
        clock.now += 50
        await pool.renew(lease.id, ttl_s=60)
        clock.now += 50
        with pytest.raises(NoDeviceAvailable):
            await pool.acquire(holder="b", serial=sim.serial)
        clock.now += 11
        taken = await pool.acquire(holder="b", serial=sim.serial)
        assert taken.holder == "b"
        with pytest.raises(LeaseError):
            await pool.renew(lease.id)

    asyncio.run(scenario())


def test_a_pulled_phone_goes_offline_then_reconnects(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        pool = make_pool(adb_server)
        events = pool.subscribe()
        await pool.check_health()
        assert pool.devices[sim.serial].state is DeviceState.DEVICE
        lease = await pool.acquire(holder="episode", serial=sim.serial)
        driver = pool.driver(lease)
        # Pull the cable: the transport dies and the phone refuses new connections.
        sim.phone.faults.gone = True
        sim.adbd.drop_connections()
        error = None
        for _ in range(30):
            try:
                await driver.screenshot()
            except DeviceError as exc:
                error = exc
                break
            await asyncio.sleep(0.1)
        assert isinstance(error, DeviceGone)
        await pool.check_health()
        assert pool.devices[sim.serial].state in (DeviceState.OFFLINE, DeviceState.GONE)
        # Plug it back in: the next health round reconnects it.
        sim.phone.faults.gone = False
        for _ in range(20):
            await pool.check_health()
            if pool.devices[sim.serial].state is DeviceState.DEVICE:
                break
            await asyncio.sleep(0.3)
        assert pool.devices[sim.serial].state is DeviceState.DEVICE
        assert (await driver.screenshot()).width == 1080
        kinds = [(e.kind, e.state) for e in _drain(events)]
        assert ("state", DeviceState.OFFLINE) in kinds or ("state", DeviceState.GONE) in kinds
        assert kinds[-1] == ("state", DeviceState.DEVICE) or ("connected", None) in kinds

    asyncio.run(scenario())


def test_a_wedged_phone_fails_its_health_check(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        pool = make_pool(adb_server, reconnect=False)
        await pool.refresh()
        sim.phone.faults.hang = {"echo"}
        await pool.check_health()
        assert pool.devices[sim.serial].state is DeviceState.OFFLINE
        assert pool.devices[sim.serial].failures == 1
        with pytest.raises(NoDeviceAvailable):
            await pool.acquire(holder="x", serial=sim.serial)
        sim.phone.faults.hang = set()
        await pool.check_health()
        assert pool.devices[sim.serial].state is DeviceState.DEVICE

    asyncio.run(scenario())


def test_connect_reports_failure_and_an_unreachable_server(adb_server) -> None:  # type: ignore[no-untyped-def]
    pool = make_pool(adb_server)
    with pytest.raises(DeviceGone, match=r"failed to connect|refused|cannot connect"):
        asyncio.run(pool.connect("127.0.0.1:9"))
    down = DevicePool(PoolSettings(servers=["127.0.0.1:9"], health_timeout_s=1.0))
    asyncio.run(down.refresh())
    assert down.unreachable == {"127.0.0.1:9"}
    with pytest.raises(DeviceGone, match="does not answer"):
        asyncio.run(down.connect("127.0.0.1:5556"))


def _drain(queue):  # type: ignore[no-untyped-def]
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def test_the_pool_reconnects_phones_that_an_adb_server_restart_forgot() -> None:
    """adb really drops the transport: after ``adb kill-server`` the new server knows no network
    device, and only the pool's own reconnect brings the phone back."""
    import socket

    from devices.adb_server import AdbServer
    from devices.sim.fleet import SimFleet

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])

    async def scenario(server: AdbServer, serial: str) -> None:
        pool = make_pool(server)
        await pool.check_health()
        assert pool.devices[serial].state is DeviceState.DEVICE
        server.stop()
        server.start()
        assert serial not in [d.serial for d in server.client().device_list()]  # forgotten
        for _ in range(20):
            await pool.check_health()
            if pool.devices[serial].state is DeviceState.DEVICE:
                break
            await asyncio.sleep(0.3)
        assert pool.devices[serial].state is DeviceState.DEVICE
        lease = await pool.acquire(holder="after-restart", serial=serial)
        assert (await pool.driver(lease).screenshot()).width == 1080

    with AdbServer(port=port) as server, SimFleet(server) as fleet:
        asyncio.run(scenario(server, fleet.add("restart").serial))


def test_a_slow_leased_phone_keeps_its_transport_while_a_command_runs(adb_server, sim) -> None:  # type: ignore[no-untyped-def]
    """Health probes fail on a phone slowed beyond their timeout, but a leased phone's transport is
    not torn down under the episode's command, which finishes."""

    async def scenario() -> None:
        pool = make_pool(adb_server)
        pool.settings.health_timeout_s = 0.5
        await pool.check_health()
        lease = await pool.acquire(holder="episode", serial=sim.serial)
        driver = pool.driver(lease)
        driver.settings.command_timeout = 30
        events = pool.subscribe()
        sim.phone.faults.delay_s = 1.5
        command = asyncio.create_task(driver.screenshot())
        for _ in range(3):  # three failed probes while the screenshot is on its way
            await pool.check_health()
        capture = await command
        assert capture.width == 1080
        assert pool.devices[sim.serial].failures >= 2
        assert not [e for e in _drain(events) if e.kind in ("connected", "reconnect_failed")]
        sim.phone.faults.delay_s = 0.0

    asyncio.run(scenario())
