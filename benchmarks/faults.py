"""How the service holds up when its policy server hangs and when a request is built to freeze it.

    .venv/bin/python benchmarks/faults.py [--policy-timeout 10] [--service-checkout DIR] [--json]

Runs `uis1 serve` as in production (its own process, SQLite) with one simulated 1080x2400 phone
behind a private adb server and a policy server that accepts connections and never answers, then:

- **hung policy**: how long `/readyz` takes to answer, and how long a task takes to fail (its error
  says why), with `UIS1_POLICY__TIMEOUT_S` = --policy-timeout (the deadline is the default,
  1.5 x that);
- **largest predict request**: twenty one-colour 8000x5000 PNGs (40 Mpx each) in one authorised
  `/v1/predict` request, and twenty of 2236x2236 (5 Mpx each, 100 Mpx in all: the default budget
  of one request, so decoded and sent on to the hung policy): the answer, its time, and the longest
  `/healthz` took meanwhile (polled every 20 ms): how long the event loop was frozen;
- **big body without a key**: 50 MB of invalid JSON to `POST /v1/tasks` with no key: the answer, its
  time, and the longest `/healthz` meanwhile.

--service-checkout runs another checkout's service (e.g. a `git worktree` of an older commit) for a
before/after comparison on the same phones and machine.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from machine import about, facts
from PIL import Image
from service import ServiceProcess

from devices.adb_server import AdbServer
from devices.ports import free_port
from devices.sim.fleet import SimFleet


class HungServer:
    """Accepts connections and reads what comes, never answering (a wedged policy server)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


class HealthWatch:
    """Polls /healthz every 20 ms in a thread; ``worst`` is the longest answer seen."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.base, timeout=120) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                client.get("/healthz")
                self.worst = max(self.worst, time.perf_counter() - t0)
                time.sleep(0.02)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def one_colour_png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("L", (width, height), 200).save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode()


def predict_freeze(
    client: httpx.Client, auth: dict[str, str], base: str, width: int, height: int
) -> dict[str, Any]:
    """Twenty one-colour PNGs of ``width`` x ``height`` in one /v1/predict request."""
    shots = [one_colour_png(width, height)] * 20
    history = ['<think>Wait.</think>\n<action>{"action": "wait", "time": 1}</action>'] * (len(shots) - 1)
    body = json.dumps({"goal": "what is on the screen?", "screenshots": shots, "history": history}).encode()
    with HealthWatch(base) as watch:
        time.sleep(0.1)  # the watch has a baseline
        t0 = time.perf_counter()
        answer = client.post(
            "/v1/predict", content=body, headers={**auth, "Content-Type": "application/json"}
        )
        took = time.perf_counter() - t0
        time.sleep(0.2)
    mpx = width * height / 1e6
    print(
        f"  predict, 20 x {mpx:.0f} Mpx in {len(body) / 1e6:.1f} MB: {answer.status_code} in {took:.2f} s; "
        f"/healthz worst {watch.worst:.2f} s",
        flush=True,
    )
    return {
        "megapixels_each": mpx,
        "request_mb": len(body) / 1e6,
        "status": answer.status_code,
        "seconds": took,
        "healthz_worst_s": watch.worst,
        "detail": answer.text[:200],
    }


def measure(base: str, token: str, serial: str) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    found: dict[str, Any] = {}
    with httpx.Client(base_url=base, timeout=600) as client:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            status = client.get("/readyz").status_code
            times.append(time.perf_counter() - t0)
        found["readyz"] = {"status": status, "seconds": max(times)}
        print(f"  /readyz with the policy hung: {status} in {max(times):.2f} s (worst of 3)", flush=True)

        t0 = time.perf_counter()
        created = client.post(
            "/v1/tasks", json={"goal": "open settings", "device": {"serial": serial}}, headers=auth
        )
        task_id = created.json()["id"]
        while True:
            task = client.get(f"/v1/tasks/{task_id}", headers=auth).json()
            if task["status"] not in ("pending", "running"):
                break
            time.sleep(0.2)
        found["hung_task"] = {
            "seconds": time.perf_counter() - t0,
            "status": task["status"],
            "error": task["error"],
        }
        print(
            f"  task with the policy hung: {task['status']} after {found['hung_task']['seconds']:.1f} s "
            f"({task['error']})",
            flush=True,
        )

        for name, (width, height) in (("big_predict", (8000, 5000)), ("budget_predict", (2236, 2236))):
            found[name] = predict_freeze(client, auth, base, width, height)

        junk = b"{" + b"x" * (50 * 1024 * 1024)
        with HealthWatch(base) as watch:
            time.sleep(0.1)
            t0 = time.perf_counter()
            try:
                answer = client.post("/v1/tasks", content=junk, headers={"Content-Type": "application/json"})
                refused = str(answer.status_code)
            except httpx.HTTPError as exc:  # refused mid-upload: the connection closes
                refused = f"closed ({type(exc).__name__})"
            took = time.perf_counter() - t0
            time.sleep(0.2)
        found["big_body_no_key"] = {"status": refused, "seconds": took, "healthz_worst_s": watch.worst}
        print(
            f"  50 MB of invalid JSON without a key: {refused} in {took:.2f} s; /healthz worst {watch.worst:.2f} s",
            flush=True,
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--policy-timeout", type=float, default=10.0, help="UIS1_POLICY__TIMEOUT_S (seconds)."
    )
    parser.add_argument("--service-checkout", type=Path, default=None, help="Run another checkout's service.")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON too.")
    args = parser.parse_args()
    print(f"machine: {about()}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="uis1-faults-"))
    hung = HungServer()
    with AdbServer(port=free_port()) as adb, SimFleet(adb) as fleet:
        device = fleet.add(width=1080, height=2400)
        service = ServiceProcess(
            workdir,
            port=free_port(),
            adb_port=adb.port,
            policy_url=f"http://127.0.0.1:{hung.port}",
            checkout=args.service_checkout,
            settings={"UIS1_POLICY__TIMEOUT_S": str(args.policy_timeout)},
        ).start()
        try:
            print(
                f"service {'from ' + str(args.service_checkout) if args.service_checkout else 'from this checkout'}, "
                f"policy timeout {args.policy_timeout:g} s:",
                flush=True,
            )
            found = measure(service.base, service.token, device.serial)
        finally:
            service.stop()
            hung.close()
    if args.json:
        print(json.dumps({"machine": facts(), "policy_timeout_s": args.policy_timeout, **found}, indent=2))


if __name__ == "__main__":
    main()
