"""Bytes and milliseconds per screenshot through the adb server, by capture path, side by side.

    .venv/bin/python benchmarks/screenshot_path.py [--frames 30] [--width 1080 --height 2400] [--json]

One simulated phone behind a private adb server (the adbutils wheel's binary), the same phone for
every path, the paths interleaved frame by frame:

- `driver png`: AdbDriver.screenshot() with capture=png (`screencap -p`; its size read from the
  PNG's header; decoded for the black-frame check only when it is small enough to be all black,
  which app screens are not), what the service uses by default;
- `driver raw`: capture=raw (`screencap` RGBA frame, PNG encoded on this side for the store);
- `adbutils screenshot()`: adbutils' own call (`screencap -p` over its shell, decoded to a PIL image,
  no black-frame check);
- `transfer only (png)` / `(raw)`: the shell output read as bytes, nothing decoded: the wire cost.

Three screens: `static` repeats one frame (the simulated phone draws it once, so the figures are the
transfer and this side's work), `changing` alternates two screens (the phone encodes each frame
anew, as a real phone does every time; a real phone's PNG encoder is slower than this machine's),
and `photo`: the home screen over a photo-like wallpaper, a 2 MB PNG as real phones send (drawn
once, so the figures are the read path's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from machine import about

from devices.adb import AdbDriver, DriverSettings
from devices.adb_server import AdbServer
from devices.ports import free_port
from devices.sim.fleet import SimFleet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=30, help="Frames per path and screen.")
    parser.add_argument("--width", type=int, default=1080)
    parser.add_argument("--height", type=int, default=2400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with AdbServer(port=free_port()) as server:
        fleet = SimFleet(server)
        device = fleet.add(width=args.width, height=args.height)
        try:
            results = run(fleet, device, args.frames)
        finally:
            device.adbd.stop()

    print(f"\nscreenshots of a {args.width}x{args.height} simulated phone through the adb server ({about()})")
    print(f"{'screen':<9} {'path':<24} {'KB/frame':>9} {'median':>9} {'p95':>9} {'frames/s':>9}")
    for r in results:
        print(
            f"{r['screen']:<9} {r['path']:<24} {r['bytes'] / 1024:>9.0f} {r['median_ms']:>6.1f} ms "
            f"{r['p95_ms']:>6.1f} ms {1000 / r['median_ms']:>9.1f}"
        )
    if args.json:
        print(
            json.dumps(
                {"machine": about(), "screen": [args.width, args.height], "results": results}, indent=2
            )
        )


def run(fleet: SimFleet, device: Any, frames: int) -> list[dict[str, Any]]:
    client = fleet.client()
    png = AdbDriver(client, device.serial, DriverSettings(use_uiautomator2=False))
    raw = AdbDriver(client, device.serial, DriverSettings(use_uiautomator2=False, capture="raw"))
    adb_device = client.device(device.serial)
    loop = asyncio.new_event_loop()

    def driver_png() -> int:
        return len(loop.run_until_complete(png.screenshot()).png)

    def driver_raw() -> int:
        return len(loop.run_until_complete(raw.screenshot()).png)

    def adbutils_screenshot() -> int:
        image = adb_device.screenshot()
        image.load()  # PIL decodes lazily: count the decode, as the driver paths do
        return int(image.width * image.height * 3)  # a decoded image; the PNG size is the same as driver png

    def transfer(command: str) -> Callable[[], int]:
        def go() -> int:  # the driver's own transport (shell protocol v2), nothing decoded
            return len(png._run(command, 30).stdout)

        return go

    paths: dict[str, Callable[[], int]] = {
        "driver png": driver_png,
        "driver raw": driver_raw,
        "adbutils screenshot()": adbutils_screenshot,
        "transfer only (png)": transfer("screencap -p"),
        "transfer only (raw)": transfer("screencap"),
    }
    phone = device.phone
    results: list[dict[str, Any]] = []
    for screen in ("static", "changing", "photo"):
        if screen == "photo":
            phone.wallpaper = True
            phone.home()
        samples: dict[str, list[float]] = {name: [] for name in paths}
        sizes: dict[str, int] = {}
        for frame in range(frames + 2):  # the first two are warm-up
            for name, call in paths.items():
                if screen == "changing":
                    phone.settings.dark_mode = not phone.settings.dark_mode  # a new frame to draw
                t0 = time.perf_counter()
                size = call()
                elapsed = time.perf_counter() - t0
                if frame >= 2:
                    samples[name].append(elapsed)
                    sizes[name] = size
        for name, values in samples.items():
            ordered = sorted(values)
            measured = sizes[name]
            if name == "adbutils screenshot()":
                measured = sizes["transfer only (png)"]  # bytes on the wire: the PNG
            elif name == "driver raw":
                measured = sizes["transfer only (raw)"]
            results.append(
                {
                    "screen": screen,
                    "path": name,
                    "bytes": measured,
                    "median_ms": statistics.median(values) * 1000,
                    "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000,
                }
            )
    loop.close()
    return results


if __name__ == "__main__":
    main()
