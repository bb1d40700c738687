from __future__ import annotations

import asyncio

import pytest

from devices.adb import AdbDriver, DriverSettings

pytestmark = pytest.mark.timeout(60)


def test_several_simulated_phones_run_at_once_with_their_own_serials(fleet) -> None:  # type: ignore[no-untyped-def]
    extra = [fleet.add(f"multi-{i}", width=720 + 360 * i, height=1600 + 800 * i) for i in range(2)]
    try:
        serials = {d.serial for d in extra}
        assert len(serials) == 2
        listed = {d.serial: d.state for d in fleet.client().list()}
        assert all(listed[s] == "device" for s in serials)

        async def act() -> list[tuple[int, int]]:
            drivers = [
                AdbDriver(fleet.client(), d.serial, DriverSettings(use_uiautomator2=False)) for d in extra
            ]
            await drivers[0].open_app("Clock")
            await drivers[1].open_app("Notes")
            return [await drv.screen_size() for drv in drivers]

        sizes = asyncio.run(act())
        assert sizes == [(720, 1600), (1080, 2400)]
        assert extra[0].phone.foreground.package == "com.google.android.deskclock"
        assert extra[1].phone.foreground.package == "com.example.notes"
    finally:
        for device in extra:
            fleet.devices.remove(device)
            fleet.client().disconnect(device.serial)
            device.adbd.stop()
