"""The adb sync protocol (v1) over a stream: STAT, LIST, SEND, RECV, QUIT, on the phone's files.

Requests are a 4-byte id and a little-endian u32 (a path length, then the path); file data moves
in ``DATA`` chunks of at most 64 KiB and ends with ``DONE``.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

from devices.sim.phone import FileEntry, SimPhone

if TYPE_CHECKING:
    from devices.sim.adbd import Stream

MAX_CHUNK = 64 * 1024
MAX_PATH = 1024
S_IFDIR = 0o040000


def _dirs(phone: SimPhone) -> set[str]:
    dirs = {"/", "/sdcard", "/data", "/data/local", "/data/local/tmp", "/sdcard/Download"}
    for path in phone.files:
        parts = path.split("/")[:-1]
        for i in range(2, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


async def serve(stream: Stream, phone: SimPhone) -> None:
    from devices.sim.adbd import StreamClosed

    while True:
        try:
            header = await stream.read_exact(8)
        except StreamClosed:
            return  # clients may just close at a request boundary
        ident, length = header[:4], struct.unpack("<I", header[4:])[0]
        if ident == b"QUIT":
            return
        if length > MAX_PATH + 32:
            await _fail(stream, "path too long")
            return
        arg = (await stream.read_exact(length)).decode("utf-8", "replace")
        if ident == b"STAT":
            await stream.write(b"STAT" + _stat(phone, arg))
        elif ident == b"LIST":
            await _list(stream, phone, arg)
        elif ident == b"RECV":
            entry = phone.files.get(arg)
            if entry is None:
                await _fail(stream, f"remote object '{arg}' does not exist")
                continue
            content = entry.data
            for start in range(0, len(content), MAX_CHUNK):
                chunk = content[start : start + MAX_CHUNK]
                await stream.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
            await stream.write(b"DONE" + struct.pack("<I", 0))
        elif ident == b"SEND":
            path, _, mode_text = arg.rpartition(",")
            if not path:
                path, mode_text = arg, "33188"
            data = bytearray()
            while True:
                chunk_id = await stream.read_exact(4)
                size = struct.unpack("<I", await stream.read_exact(4))[0]
                if chunk_id == b"DATA":
                    if size > MAX_CHUNK:
                        await _fail(stream, "chunk too large")
                        return
                    data.extend(await stream.read_exact(size))
                elif chunk_id == b"DONE":
                    mode = int(mode_text) if mode_text.isdigit() else 0o100644
                    phone.files[path] = FileEntry(bytes(data), mode=mode, mtime=size or int(time.time()))
                    await stream.write(b"OKAY" + struct.pack("<I", 0))
                    break
                else:
                    await _fail(stream, "unexpected sync chunk")
                    return
        else:
            await _fail(stream, f"unknown sync request {ident!r}")
            return


def _stat(phone: SimPhone, path: str) -> bytes:
    entry = phone.files.get(path)
    if entry is not None:
        return struct.pack("<3I", entry.mode, len(entry.data), entry.mtime)
    if path.rstrip("/") in _dirs(phone) or path == "/":
        return struct.pack("<3I", S_IFDIR | 0o771, 4096, int(time.time()))
    return struct.pack("<3I", 0, 0, 0)


async def _list(stream: Stream, phone: SimPhone, path: str) -> None:
    base = path.rstrip("/") + "/"
    seen: set[str] = set()
    for file_path, entry in sorted(phone.files.items()):
        if file_path.startswith(base):
            name = file_path[len(base) :].split("/", 1)[0]
            if name in seen:
                continue
            seen.add(name)
            is_dir = "/" in file_path[len(base) :]
            mode, size = (S_IFDIR | 0o771, 4096) if is_dir else (entry.mode, len(entry.data))
            raw = name.encode()
            await stream.write(b"DENT" + struct.pack("<4I", mode, size, entry.mtime, len(raw)) + raw)
    await stream.write(b"DONE" + struct.pack("<4I", 0, 0, 0, 0))


async def _fail(stream: Stream, message: str) -> None:
    raw = message.encode()
    await stream.write(b"FAIL" + struct.pack("<I", len(raw)) + raw)
