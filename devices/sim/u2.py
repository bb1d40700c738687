"""The simulated phone's uiautomator2 server: HTTP JSON-RPC behind the adb ``tcp:9008`` service.

The real uiautomator2 client pushes its jar, starts ``app_process ... com.wetest.uia2.Main`` (the
shell marks the server running), polls ``GET /ping`` and then calls ``POST /jsonrpc/0``. One HTTP
request per connection. Methods: the ones the driver and the client's common calls use
(hierarchy dump, screenshot, click, swipe, key presses, clipboard and its IME text input,
device info).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import TYPE_CHECKING, Any

from PIL import Image

from devices.keys import keycode
from devices.sim.phone import SimPhone

if TYPE_CHECKING:
    from devices.sim.adbd import Stream

MAX_REQUEST = 4 * 1024 * 1024


class RpcError(Exception):
    def __init__(self, message: str, code: int = -32001) -> None:
        super().__init__(message)
        self.code = code


class U2Server:
    PORT = 9008

    def __init__(self, phone: SimPhone) -> None:
        self.phone = phone
        self.calls: list[str] = []

    def accepts(self) -> bool:
        return self.phone.u2_running

    async def handle(self, stream: Stream) -> None:
        request = await _read_request(stream)
        if request is None:
            return
        method, path, body = request
        if method == "GET" and path == "/ping":
            await stream.write(_response(200, b"pong", "text/plain"))
        elif method == "GET" and path == "/stop":
            self.phone.u2_running = False
            await stream.write(_response(200, b"server stopped", "text/plain"))
        elif method == "POST" and path.startswith("/jsonrpc/0"):
            reply = await asyncio.to_thread(self._rpc, body)
            await stream.write(_response(200, json.dumps(reply).encode(), "application/json"))
        else:
            await stream.write(_response(404, b"not found", "text/plain"))

    def _rpc(self, body: bytes) -> dict[str, Any]:
        try:
            call = json.loads(body)
            name = call["method"]
            params = call.get("params") or []
        except (ValueError, KeyError, TypeError):
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
        self.calls.append(name)
        try:
            result = self._call(name, params if isinstance(params, list) else [])
        except RpcError as exc:
            return {"jsonrpc": "2.0", "id": call.get("id"), "error": {"code": exc.code, "message": str(exc)}}
        return {"jsonrpc": "2.0", "id": call.get("id"), "result": result}

    def _call(self, name: str, params: list[Any]) -> Any:
        phone = self.phone
        if name == "deviceInfo":
            return _device_info(phone)
        if name == "dumpWindowHierarchy":
            return phone.hierarchy()
        if name == "takeScreenshot":
            return _jpeg_base64(phone, quality=int(params[1]) if len(params) > 1 else 80)
        if name == "click":
            x, y = int(params[0]), int(params[1])
            if len(params) > 2 and float(params[2]) >= 500:
                phone.long_press(x, y)
            else:
                phone.tap(x, y)
            return True
        if name in ("swipe", "drag"):
            fx, fy, tx, ty = (int(v) for v in params[:4])
            steps = int(params[4]) if len(params) > 4 else 55
            phone.swipe(fx, fy, tx, ty, steps * 5)
            return True
        if name == "pressKey":
            phone.keyevent(keycode(str(params[0])))
            return True
        if name == "pressKeyCode":
            phone.keyevent(int(params[0]))
            return True
        if name == "setClipboard":
            phone.clipboard = str(params[1] if len(params) > 1 else params[0])
            return None
        if name == "getClipboard":
            return phone.clipboard
        if name == "pasteClipboard":
            phone.type_text(phone.clipboard)
            return None
        if name == "clearInputText":
            if phone.focused is not None:
                phone.focused.value = ""
            return None
        if name in ("wakeUp", "sleep"):
            phone.screen_on = name == "wakeUp"
            return None
        if name == "isScreenOn":
            return phone.screen_on
        if name in ("waitForIdle", "waitForWindowUpdate", "freezeRotation", "ping"):
            return True if name != "ping" else "pong"
        raise RpcError(f"java.lang.NoSuchMethodException: {name}", code=-32601)


def _device_info(phone: SimPhone) -> dict[str, Any]:
    """What the agent's ``deviceInfo`` answers."""
    return {
        "currentPackageName": phone.foreground.package,
        "displayWidth": phone.width,
        "displayHeight": phone.height,
        "displayRotation": phone.rotation,
        "displaySizeDpX": round(phone.width / 2.625),
        "displaySizeDpY": round(phone.height / 2.625),
        "productName": "sim",
        "naturalOrientation": True,
        "screenOn": phone.screen_on,
        "sdkInt": 34,
    }


def _jpeg_base64(phone: SimPhone, *, quality: int) -> str:
    """The screen as ``takeScreenshot`` sends it: a JPEG in base64."""
    image = Image.open(io.BytesIO(phone.screenshot_png())).convert("RGB")
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    return base64.b64encode(buf.getvalue()).decode("ascii")


async def _read_request(stream: Stream) -> tuple[str, str, bytes] | None:
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = await stream.read()
        if not chunk:
            return None
        data.extend(chunk)
        if len(data) > MAX_REQUEST:
            return None
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path = [*lines[0].split(" "), "", ""][:2]
    length = 0
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length > MAX_REQUEST:
        return None
    body_buf = bytearray(body)
    while len(body_buf) < length:
        chunk = await stream.read()
        if not chunk:
            return None
        body_buf.extend(chunk)
    return method, path, bytes(body_buf[:length])


def _response(status: int, body: bytes, content_type: str) -> bytes:
    reason = {200: "OK", 404: "Not Found"}.get(status, "OK")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
