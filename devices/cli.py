"""``uis1 devices ...`` and ``uis1 sim ...``: list and connect phones, run simulated ones."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import Annotated

import typer

from devices.adb_server import default_port, default_server

app = typer.Typer(
    help="Android devices on adb servers: list, connect, disconnect.",
    no_args_is_help=True,
    add_completion=False,
)
# `uis1 sim ...` (its own entry point, so the simulator is one word away).
sim_app = typer.Typer(
    help="Simulated phones behind a real adb server.", no_args_is_help=True, add_completion=False
)


@sim_app.callback()
def _sim() -> None:
    # A callback keeps typer from collapsing a one-command group into that command.
    pass


def _pool(servers: list[str]):  # type: ignore[no-untyped-def]
    from devices.pool import DevicePool, PoolSettings

    return DevicePool(PoolSettings(servers=servers))


@app.command("list")
def list_devices(
    server: Annotated[
        list[str] | None, typer.Option("--server", "-s", help="adb server host:port (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """List the devices every adb server knows, with their states."""
    import json
    import logging

    logging.getLogger("devices.pool").setLevel(logging.ERROR)  # the unreachable servers are said below
    try:
        pool = _pool(server or [default_server()])
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    asyncio.run(pool.refresh())
    for address in sorted(pool.unreachable):
        typer.echo(f"error: no adb server answers at {address} (start one with `adb start-server`)", err=True)
    if pool.unreachable and len(pool.unreachable) == len(pool.settings.servers):
        raise typer.Exit(2)
    if as_json:
        rows = [
            {"serial": d.serial, "state": d.state.value, "model": d.model, "server": d.server}
            for d in sorted(pool.devices.values(), key=lambda d: d.serial)
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not pool.devices:
        typer.echo(
            f"no devices on {', '.join(pool.settings.servers)} (connect one with `uis1 devices connect "
            "HOST:PORT`, or start `uis1 sim start`)",
            err=True,
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("SERIAL", "STATE", "MODEL", "SERVER", box=None, pad_edge=False, show_edge=False)
    for device in sorted(pool.devices.values(), key=lambda d: d.serial):
        table.add_row(device.serial, device.state.value, device.model or "-", device.server)
    Console(width=None if sys.stdout.isatty() else 1000).print(table)


@app.command("connect")
def connect(
    address: Annotated[
        str, typer.Argument(help="The device's host:port (wireless debugging, a remote emulator).")
    ],
    server: Annotated[
        str | None, typer.Option("--server", "-s", help="adb server host:port (default: adb's own).")
    ] = None,
) -> None:
    """Attach a network device to an adb server (``adb connect``)."""
    from devices.base import DeviceGone

    pool = _pool([server or default_server()])
    try:
        device = asyncio.run(pool.connect(address))
    except DeviceGone as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{device.serial} {device.state.value} {device.model}")


@app.command("disconnect")
def disconnect(
    address: Annotated[str, typer.Argument(help="The device's host:port.")],
    server: Annotated[
        str | None, typer.Option("--server", "-s", help="adb server host:port (default: adb's own).")
    ] = None,
) -> None:
    """Detach a network device from its adb server."""
    asyncio.run(_pool([server or default_server()]).disconnect(address))
    typer.echo(f"disconnected {address}")


@sim_app.command("start")
def sim_start(
    count: Annotated[int, typer.Option("--count", "-n", min=1, max=32, help="How many phones.")] = 1,
    port: Annotated[
        int | None,
        typer.Option(
            help="Port of the local adb server to attach them to, started if needed (default: adb's own)."
        ),
    ] = None,
    width: Annotated[int, typer.Option(help="Screen width in pixels.")] = 1080,
    height: Annotated[int, typer.Option(help="Screen height in pixels.")] = 2400,
    display: Annotated[
        str, typer.Option(help="Display profile: standard, or learnable (larger UI, 5 marked rows a list).")
    ] = "standard",
) -> None:
    """Start simulated phones, print their serials, and run until Ctrl-C."""
    from devices.adb_server import AdbServer
    from devices.sim.display import PROFILES
    from devices.sim.fleet import SimFleet

    if display not in PROFILES:
        raise typer.BadParameter(f"choose one of {', '.join(PROFILES)}", param_hint="--display")

    server = AdbServer(port=port if port is not None else default_port())
    started_here = not server.is_running()
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with SimFleet(server) as fleet:
        for _ in range(count):
            device = fleet.add(width=width, height=height, display=PROFILES[display])
            typer.echo(device.serial)
        typer.echo(
            f"{count} simulated phone(s) on the adb server at 127.0.0.1:{server.port}; Ctrl-C stops them",
            err=True,
        )
        stop.wait()
    if started_here:
        server.stop()
    typer.echo("stopped", err=True)
