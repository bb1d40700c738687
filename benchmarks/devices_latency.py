"""Latency of the device layer on the simulated phone, through the real adb server.

    .venv/bin/python benchmarks/devices_latency.py [--rounds 20]

Prints the median and maximum of: rendering a 1080x2400 frame in-process, and the driver's
screenshot, tap and hierarchy calls over adb. Figures depend on the machine, which is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from machine import about

from devices.adb import AdbDriver, DriverSettings
from devices.adb_server import AdbServer
from devices.ports import free_port
from devices.sim.fleet import SimFleet
from devices.sim.phone import SimPhone


def report(name: str, samples: list[float]) -> None:
    print(
        f"{name:<42} median {statistics.median(samples) * 1000:6.1f} ms   max {max(samples) * 1000:6.1f} ms"
    )


async def measure(fn: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"machine: {about()}")
    phone = SimPhone("bench")
    phone.start("com.android.contacts")
    renders = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        phone.screenshot_png()
        renders.append(time.perf_counter() - start)
    report("render 1080x2400 PNG (in-process)", renders)
    with AdbServer(port=free_port()) as server, SimFleet(server) as fleet:
        device = fleet.add()
        device.phone.start("com.android.contacts")
        driver = AdbDriver(fleet.client(), device.serial, DriverSettings(use_uiautomator2=False))

        async def run() -> None:
            report("AdbDriver.screenshot (adb, shell v2)", await measure(driver.screenshot, args.rounds))
            report("AdbDriver.tap (adb)", await measure(lambda: driver.tap(5, 5), args.rounds))
            report(
                "AdbDriver.hierarchy (adb, uiautomator dump)", await measure(driver.hierarchy, args.rounds)
            )

        asyncio.run(run())


if __name__ == "__main__":
    main()
