"""``/v1/devices``: the pool's devices, live screenshots, connecting and releasing (admin)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Response, status

from devices.base import DeviceError, DeviceGone
from devices.pool import PooledDevice
from serve.api.deps import AdminKey, AgentKey, StateDep
from serve.api.schemas import ConnectRequest, DeviceResponse
from serve.api.validation import StrictJsonRoute
from serve.tasks.cluster import device_key

router = APIRouter(prefix="/v1/devices", tags=["devices"], route_class=StrictJsonRoute)


def _response(device: PooledDevice, holders: dict[str, str]) -> DeviceResponse:
    holder = holders.get(device_key(device.server, device.serial)) or (
        device.lease.holder if device.lease else None
    )
    return DeviceResponse(
        serial=device.serial,
        state=device.state.value,
        model=device.model,
        server=device.server,
        labels=device.labels,
        leased_by=holder,
    )


@router.get("", response_model=list[DeviceResponse])
async def list_devices(state: StateDep, key: AgentKey) -> list[DeviceResponse]:
    """Every device with its state and the task holding it (on any replica)."""
    await state.pool.refresh()
    holders = await asyncio.to_thread(state.runner.cluster.holders)
    return [_response(d, holders) for d in sorted(state.pool.devices.values(), key=lambda d: d.serial)]


@router.get(
    "/{serial}/screenshot",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "The screen now."}},
)
async def screenshot(serial: str, state: StateDep, key: AgentKey) -> Response:
    device = state.pool.devices.get(serial)
    if device is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no device {serial}")
    from devices.adb import AdbDriver

    _, client = state.pool.client_for(device.server)
    try:
        capture = await AdbDriver(client, serial, state.pool.settings.driver).screenshot()
    except DeviceError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None
    return Response(capture.png, media_type="image/png")


@router.post("/connect", response_model=DeviceResponse)
async def connect(body: ConnectRequest, state: StateDep, key: AdminKey) -> DeviceResponse:
    try:
        device = await state.pool.connect(body.address, body.server)
    except DeviceGone as exc:
        if "does not answer" in exc.message:  # our adb server is down: that is ours to fix
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, exc.message) from None
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"could not connect: {exc.message}") from None
    except ValueError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    return _response(device, {})


@router.post("/{serial}/release", response_model=DeviceResponse)
async def release(serial: str, state: StateDep, key: AdminKey) -> DeviceResponse:
    """Free a stuck lease, here and in the database (the episode holding it is not stopped; cancel it first)."""
    device = state.pool.devices.get(serial)
    if device is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no device {serial}")
    await asyncio.to_thread(state.runner.cluster.release_device, device_key(device.server, serial))
    if device.lease is not None:
        await state.pool.release(device.lease.id)
    return _response(device, {})
