"""A fake ``adbd`` for the simulated phone: the device side of the adb transport protocol over TCP.

The *real* adb server attaches it with ``adb connect 127.0.0.1:PORT``, exactly as it attaches a
phone in wireless debugging, and every client (adbutils, the ``adb`` command line, uiautomator2)
then reaches the phone through that server. Messages are 24-byte headers (command, arg0, arg1,
length, checksum, magic) plus payload; streams are opened with OPEN, answered with OKAY, carry
data in WRTE (one unacknowledged WRTE per stream at a time) and end with CLSE.

Services: ``shell:`` (raw), ``shell,v2:`` (packetised, with exit code), ``exec:``, ``sync:``
(STAT/LIST/SEND/RECV), and ``tcp:9008`` for the uiautomator2 server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from devices.sim import shell, sync
from devices.sim.phone import SimPhone

log = logging.getLogger(__name__)

A_CNXN = 0x4E584E43
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_WRTE = 0x45545257
A_CLSE = 0x45534C43
A_AUTH = 0x48545541
A_VERSION = 0x01000001
MAX_PAYLOAD = 256 * 1024
HEADER = struct.Struct("<6I")
# Only what this device implements: v1 sync (no stat_v2/sendrecv_v2, or the adb CLI would use
# the v2 sync protocol) and the v2 shell protocol.
FEATURES = "shell_v2,cmd"


def _packet(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    return HEADER.pack(command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, command ^ 0xFFFFFFFF) + data


class StreamClosed(Exception):
    pass


class Stream:
    """One adb stream as a byte pipe: ``read_exact``/``read`` what the host wrote, ``write`` back."""

    def __init__(self, conn: _Connection, local_id: int, remote_id: int) -> None:
        self.conn = conn
        self.local_id = local_id
        self.remote_id = remote_id
        self._buffer = bytearray()
        self._data = asyncio.Event()
        self._acked = asyncio.Event()
        self._acked.set()
        self.closed = False

    def feed(self, data: bytes) -> None:
        self._buffer.extend(data)
        self._data.set()

    def ack(self) -> None:
        self._acked.set()

    def host_closed(self) -> None:
        self.closed = True
        self._data.set()
        self._acked.set()

    async def read(self, limit: int = 65536) -> bytes:
        """Whatever has arrived (at least one byte); ``b""`` once the host closed the stream."""
        while not self._buffer:
            if self.closed:
                return b""
            self._data.clear()
            await self._data.wait()
        data = bytes(self._buffer[:limit])
        del self._buffer[:limit]
        return data

    async def read_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if self.closed:
                raise StreamClosed
            self._data.clear()
            await self._data.wait()
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        chunk = self.conn.max_payload
        for start in range(0, len(view), chunk):
            if self.closed:
                raise StreamClosed
            await self._acked.wait()
            if self.closed:
                raise StreamClosed
            self._acked.clear()
            await self.conn.send(
                _packet(A_WRTE, self.local_id, self.remote_id, bytes(view[start : start + chunk]))
            )
            if self.conn.phone.faults.drop_mid_stream:
                self.conn.phone.faults.drop_mid_stream = False
                self.conn.abort()
                raise StreamClosed

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(ConnectionError):
                await self.conn.send(_packet(A_CLSE, self.local_id, self.remote_id))
        self.conn.streams.pop(self.local_id, None)

    async def wait_closed(self) -> None:
        """Block until the host closes the stream (for services that run until then)."""
        while not self.closed:
            self._data.clear()
            await self._data.wait()


Service = Callable[[Stream, str], Awaitable[None]]


class TcpService(Protocol):
    """Something listening on a device-local TCP port (reached with the adb ``tcp:PORT`` service)."""

    def accepts(self) -> bool: ...

    async def handle(self, stream: Stream) -> None: ...


@dataclass(eq=False)
class _Connection:
    phone: SimPhone
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    max_payload: int = 4096

    def __post_init__(self) -> None:
        self.streams: dict[int, Stream] = {}
        self.next_id = 1
        self.tasks: set[asyncio.Task[None]] = set()
        self._send_lock = asyncio.Lock()

    async def send(self, data: bytes) -> None:
        async with self._send_lock:
            self.writer.write(data)
            await self.writer.drain()

    def abort(self) -> None:
        transport = self.writer.transport
        if transport is not None:
            transport.abort()


class AdbdServer:
    """Serves one ``SimPhone`` on a loopback TCP port, in its own event-loop thread."""

    def __init__(self, phone: SimPhone, host: str = "127.0.0.1", port: int = 0) -> None:
        self.phone = phone
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._services: dict[str, Service] = {
            "shell": self._shell,
            "exec": self._exec,
            "sync": self._sync,
            "tcp": self._tcp,
        }
        self.tcp_handlers: dict[int, TcpService] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> AdbdServer:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._serve, self.host, self.port))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=main, name=f"adbd-{self.phone.serial}", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self._connections):
                conn.abort()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    def drop_connections(self) -> None:
        """Cut every transport now (a cable pulled); the server side sees the socket die."""
        if self._loop is not None:
            for conn in list(self._connections):
                self._loop.call_soon_threadsafe(conn.abort)

    # -- transport ----------------------------------------------------------------------------
    def _gone(self) -> bool:
        return self.phone.faults.gone

    def _wedged(self) -> bool:
        return self.phone.faults.offline

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._gone():
            writer.close()
            return
        conn = _Connection(self.phone, reader, writer)
        self._connections.add(conn)
        try:
            while True:
                header = await reader.readexactly(HEADER.size)
                command, arg0, arg1, length, _check, magic = HEADER.unpack(header)
                if magic != command ^ 0xFFFFFFFF:
                    log.warning("bad magic from host; dropping the transport")
                    return
                payload = await reader.readexactly(length) if length else b""
                if self._gone():
                    return
                if self._wedged():
                    continue  # wedged: read everything, answer nothing
                await self._dispatch(conn, command, arg0, arg1, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for stream in list(conn.streams.values()):
                stream.host_closed()
            for task in list(conn.tasks):
                task.cancel()
            self._connections.discard(conn)
            conn.abort()

    async def _dispatch(self, conn: _Connection, command: int, arg0: int, arg1: int, payload: bytes) -> None:
        if command == A_CNXN:
            conn.max_payload = max(4096, min(arg1 or 4096, MAX_PAYLOAD))
            props = shell.properties(self.phone)
            banner = (
                f"device::ro.product.name={props['ro.product.name']};ro.product.model={props['ro.product.model']};"
                f"ro.product.device={props['ro.product.device']};features={FEATURES}"
            ).encode()
            await conn.send(_packet(A_CNXN, A_VERSION, MAX_PAYLOAD, banner))
        elif command == A_OPEN:
            service = payload.rstrip(b"\x00").decode("utf-8", "replace")
            if not self._accepts(service):
                await conn.send(_packet(A_CLSE, 0, arg0))  # as adbd does when nothing listens
                return
            local_id = conn.next_id
            conn.next_id += 1
            stream = Stream(conn, local_id, arg0)
            conn.streams[local_id] = stream
            await conn.send(_packet(A_OKAY, local_id, arg0))
            task = asyncio.create_task(self._run_service(stream, service))
            conn.tasks.add(task)
            task.add_done_callback(conn.tasks.discard)
        elif command == A_WRTE:
            receiver = conn.streams.get(arg1)
            if receiver is not None:
                receiver.feed(payload)
                await conn.send(_packet(A_OKAY, arg1, arg0))
        elif command == A_OKAY:
            sender = conn.streams.get(arg1)
            if sender is not None:
                sender.ack()
        elif command == A_CLSE:
            closing = conn.streams.pop(arg1, None)
            if closing is not None:
                closing.host_closed()
        elif command == A_AUTH:
            pass  # this device never asks for authentication

    def _accepts(self, service: str) -> bool:
        if not service.startswith("tcp:"):
            return True
        port_text = service[4:].split(":", 1)[0]
        handler = self.tcp_handlers.get(int(port_text)) if port_text.isdigit() else None
        return handler is not None and handler.accepts()

    async def _run_service(self, stream: Stream, service: str) -> None:
        try:
            if self.phone.faults.delay_s:
                await asyncio.sleep(self.phone.faults.delay_s)
            name = service.partition(":")[0].split(",", 1)[0]
            handler = self._services.get(name)
            if handler is None:
                log.info("%s: unsupported service %r", self.phone.serial, service)
            else:
                await handler(stream, service)
        except StreamClosed:
            pass
        except Exception:
            log.exception("%s: service %r failed", self.phone.serial, service)
        finally:
            await stream.close()

    # -- services -----------------------------------------------------------------------------
    async def _run_shell(self, stream: Stream, command: str) -> shell.Result | None:
        """Run a command line off the event loop; None if it hangs or keeps running."""
        try:
            return await asyncio.to_thread(shell.run, self.phone, command)
        except shell.KeepRunning as running:
            await stream.write(running.output)
            try:
                await stream.wait_closed()
            finally:
                running.on_close()
            return None
        except TimeoutError:
            pass  # a hung command: nothing ever comes back
        await stream.wait_closed()
        return None

    async def _shell(self, stream: Stream, service: str) -> None:
        head, _, command = service.partition(":")
        result = await self._run_shell(stream, command)
        if result is None:
            return
        if "v2" in head.split(","):
            for kind, data in ((1, result.stdout), (2, result.stderr)):
                for start in range(0, len(data), 65536):
                    chunk = data[start : start + 65536]
                    await stream.write(struct.pack("<BI", kind, len(chunk)) + chunk)
            await stream.write(struct.pack("<BIB", 3, 1, result.code & 0xFF))
        else:
            await stream.write(result.stdout + result.stderr)

    async def _exec(self, stream: Stream, service: str) -> None:
        result = await self._run_shell(stream, service.partition(":")[2])
        if result is not None:
            await stream.write(result.stdout + result.stderr)

    async def _sync(self, stream: Stream, service: str) -> None:
        await sync.serve(stream, self.phone)

    async def _tcp(self, stream: Stream, service: str) -> None:
        port_text = service.partition(":")[2].split(":", 1)[0]
        handler = self.tcp_handlers.get(int(port_text)) if port_text.isdigit() else None
        if handler is not None:
            await handler.handle(stream)
