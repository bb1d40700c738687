"""How much of a step the service itself takes, at 1 to 128 concurrent episodes.

    .venv/bin/python benchmarks/service_overhead.py [--episodes 1,8,32,128] [--steps 8]
        [--policy-latency 1.0] [--json]

Runs `uis1 serve` as in production (its own process, SQLite unless --store-url) against simulated
phones behind a private adb server and a stand-in policy server with a fixed latency (an
OpenAI-compatible endpoint that answers after --policy-latency seconds: Home for a few steps, then
terminate). Each round submits N tasks at once over the API and reads their trajectories back.

Per step, `ended_at - started_at` splits into policy time (the HTTP request to the policy server),
device time (screenshot, action, settling) and the rest: the service's own work (storing and
resizing the screenshot, building and encoding the prompt, parsing, recording, scheduling).
Between steps the loop also spends time of its own; `overhead` below is everything in an
episode's wall time that is neither policy nor device time, per step. Figures depend on the
machine, which is printed: the phones, the adb server, the policy stand-in and the service share
its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from machine import about
from service import ServiceProcess

from devices.ports import free_port

HOME_ACTION = '<think>Go home.</think>\n<action>{"action": "system_button", "button": "Home"}</action>'
DONE_ACTION = '<think>Done.</think>\n<action>{"action": "terminate", "status": "success"}</action>'


# -- the policy stand-in (its own process) ----------------------------------------------------------


def serve_policy(port: int, latency: float, steps: int) -> None:
    """A minimal OpenAI-compatible server: fixed latency, Home until the last step, then terminate."""
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/v1/chat/completions":
            # Count the assistant turns without parsing megabytes of base64: that is the history.
            turns = body.count(b'"role":"assistant"') + body.count(b'"role": "assistant"')
            await asyncio.sleep(latency)
            text = DONE_ACTION if turns + 1 >= steps else HOME_ACTION
            payload: dict[str, Any] = {
                "id": "bench",
                "object": "chat.completion",
                "model": "bench",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 2000, "completion_tokens": 24, "total_tokens": 2024},
            }
        elif path == "/v1/models":
            payload = {"object": "list", "data": [{"id": "bench", "object": "model"}]}
        else:
            payload = {}
        data = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": data})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- measurement ------------------------------------------------------------------------------------


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    """The resident memory of a process (Linux /proc), in MiB; 0 where there is no /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    line = next((x for x in status.splitlines() if x.startswith("VmRSS:")), "VmRSS: 0 kB")
    return int(line.split()[1]) / 1024


async def run_round(client: httpx.AsyncClient, n: int, steps: int, pid: int) -> dict[str, Any]:
    idle = rss_mib(pid)
    peak = idle
    started = time.monotonic()
    responses = await asyncio.gather(
        *(client.post("/v1/tasks", json={"goal": f"bench {i}", "max_steps": steps + 2}) for i in range(n))
    )
    ids = []
    for response in responses:
        response.raise_for_status()
        ids.append(response.json()["id"])
    while True:  # two one-row queries a second: the benchmark's own load on the service stays small
        await asyncio.sleep(1.0)
        peak = max(peak, rss_mib(pid))
        busy = [
            (await client.get("/v1/tasks", params={"status": s, "limit": 1})).json()["tasks"]
            for s in ("pending", "running")
        ]
        if not any(busy):
            break
        if time.monotonic() - started > 600 + 10 * steps:
            raise RuntimeError(f"tasks still running after {time.monotonic() - started:.0f} s")
    trajectories = [(await client.get(f"/v1/trajectories/{i}")).json() for i in ids]
    step_overhead, policy, device, walls = [], [], [], []
    total_steps, episode_overhead, episode_wall = 0, 0.0, 0.0
    first, last = float("inf"), 0.0
    statuses: dict[str, int] = {}
    for trajectory in trajectories:
        task = trajectory["task"]
        statuses[task["status"]] = statuses.get(task["status"], 0) + 1
        begin, end = _ts(task["started_at"]), _ts(task["finished_at"])
        first, last = min(first, begin), max(last, end)
        spent = 0.0
        for step in trajectory["steps"]:
            p, d = step["policy_s"] or 0.0, step["device_s"] or 0.0
            wall = _ts(step["ended_at"]) - _ts(step["started_at"])
            step_overhead.append(max(0.0, wall - p - d))
            policy.append(p)
            device.append(d)
            walls.append(wall)
            spent += p + d
        total_steps += len(trajectory["steps"])
        episode_overhead += max(0.0, (end - begin) - spent)
        episode_wall += end - begin
    per_step = episode_overhead / total_steps
    return {
        "episodes": n,
        "steps": total_steps,
        "statuses": statuses,
        "steps_per_s": total_steps / (last - first),
        "overhead_ms_per_step": per_step * 1000,
        "overhead_share": episode_overhead / episode_wall,
        "in_step_overhead_p50_ms": pct(step_overhead, 0.5) * 1000,
        "in_step_overhead_p95_ms": pct(step_overhead, 0.95) * 1000,
        "policy_p50_ms": pct(policy, 0.5) * 1000,
        "policy_p95_ms": pct(policy, 0.95) * 1000,
        "device_p50_ms": pct(device, 0.5) * 1000,
        "device_p95_ms": pct(device, 0.95) * 1000,
        "step_p50_ms": pct(walls, 0.5) * 1000,
        "step_p95_ms": pct(walls, 0.95) * 1000,
        "rss_idle_mib": idle,
        "rss_peak_mib": peak,
        "rss_per_episode_mib": (peak - idle) / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--episodes", default="1,8,32,128", help="Concurrent episodes per round (comma list)."
    )
    parser.add_argument("--steps", type=int, default=8, help="Steps per episode.")
    parser.add_argument(
        "--policy-latency", type=float, default=1.0, help="Seconds the policy stand-in takes."
    )
    parser.add_argument("--width", type=int, default=1080)
    parser.add_argument("--height", type=int, default=2400)
    parser.add_argument("--store-url", default=None, help="Default: SQLite in a temporary folder.")
    parser.add_argument(
        "--image-transport",
        choices=["resized", "original"],
        default="resized",
        help="UIS1_IMAGE_TRANSPORT of the service.",
    )
    parser.add_argument("--capture", choices=["png", "raw"], default="png", help="UIS1_SCREENSHOT_CAPTURE.")
    parser.add_argument(
        "--service-checkout",
        type=Path,
        default=None,
        help="Run the service from another checkout's packages (before/after comparisons).",
    )
    parser.add_argument("--json", action="store_true", help="Print the results as JSON too.")
    parser.add_argument(
        "--serve-policy", nargs=3, metavar=("PORT", "LATENCY", "STEPS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve_policy:
        serve_policy(int(args.serve_policy[0]), float(args.serve_policy[1]), int(args.serve_policy[2]))
        return
    rounds = [int(n) for n in args.episodes.split(",")]

    from devices.adb_server import AdbServer
    from devices.sim.fleet import SimFleet

    workdir = Path(tempfile.mkdtemp(prefix="uis1-bench-"))
    adb = AdbServer(port=free_port())
    adb.start()
    fleet = SimFleet(adb)
    processes: list[subprocess.Popen[bytes]] = []
    service: ServiceProcess | None = None
    try:
        print(f"machine: {about()}", flush=True)
        print(f"starting {max(rounds)} simulated phones ({args.width}x{args.height}) ...", flush=True)
        for _ in range(max(rounds)):
            fleet.add(width=args.width, height=args.height)
        policy_port, api_port = free_port(), free_port()
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--serve-policy",
                    str(policy_port),
                    str(args.policy_latency),
                    str(args.steps),
                ]
            )
        )
        service = ServiceProcess(
            workdir,
            port=api_port,
            adb_port=adb.port,
            policy_url=f"http://127.0.0.1:{policy_port}",
            checkout=args.service_checkout,
            settings={
                "UIS1_IMAGE_TRANSPORT": args.image_transport,
                "UIS1_SCREENSHOT_CAPTURE": args.capture,
                "UIS1_MAX_QUEUE": "1000",
                "UIS1_READINESS_CHECKS": '["database"]',
                **({"UIS1_STORE__URL": args.store_url} if args.store_url else {}),
            },
        )
        service.start(ready="/readyz", timeout_s=60)
        base, token = service.base, service.token
        results = []

        async def measure() -> None:
            limits = httpx.Limits(max_connections=64)
            async with httpx.AsyncClient(
                base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60, limits=limits
            ) as client:
                for n in rounds:
                    for device in fleet.devices:
                        device.phone.reset()
                    print(f"round: {n} concurrent episode(s) x {args.steps} steps ...", flush=True)
                    results.append(await run_round(client, n, args.steps, service.pid))

        asyncio.run(measure())
    finally:
        if service is not None:
            service.stop()
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        for device in fleet.devices:
            device.adbd.stop()
        adb.stop()

    print(
        f"\nservice overhead, policy stand-in at {args.policy_latency * 1000:.0f} ms, {args.steps} steps per "
        f"episode, phones {args.width}x{args.height}, images {args.image_transport}, capture {args.capture} "
        f"({about()})"
    )
    header = (
        f"{'episodes':>8} {'steps/s':>8} {'overhead/step':>14} {'share':>6} {'in-step p50':>11} "
        f"{'p95':>7} {'policy p50':>10} {'device p50':>10} {'p95':>7} {'step p50':>8} {'p95':>7} "
        f"{'RSS peak':>9} {'/episode':>9}"
    )
    print(header)
    for r in results:
        print(
            f"{r['episodes']:>8} {r['steps_per_s']:>8.2f} {r['overhead_ms_per_step']:>11.1f} ms "
            f"{r['overhead_share'] * 100:>5.1f}% {r['in_step_overhead_p50_ms']:>8.1f} ms "
            f"{r['in_step_overhead_p95_ms']:>4.0f} ms {r['policy_p50_ms']:>7.0f} ms {r['device_p50_ms']:>7.0f} ms "
            f"{r['device_p95_ms']:>4.0f} ms {r['step_p50_ms']:>5.0f} ms {r['step_p95_ms']:>4.0f} ms "
            f"{r['rss_peak_mib']:>5.0f} MiB {r['rss_per_episode_mib']:>5.1f} MiB"
        )
        if set(r["statuses"]) != {"succeeded"}:
            print(f"{'':>8} statuses: {r['statuses']}")
    if args.json:
        print(
            json.dumps(
                {
                    "machine": about(),
                    "policy_latency_s": args.policy_latency,
                    "steps": args.steps,
                    "image_transport": args.image_transport,
                    "capture": args.capture,
                    "screen": [args.width, args.height],
                    "rounds": results,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
