"""Hot swaps under load on the vLLM CPU server: swap time, requests failed, time until the new
version serves.

    .venv/bin/python benchmarks/hotswap.py [--clients 8] [--json out.json]

What it does, all with the real pieces: trains the tiny Qwen2.5-VL briefly with ``uis1 train sft``
(so that its answers parse and the canary can pass; ``--sft DIR`` starts from one trained so), trains a LoRA adapter on other tasks and merges
it into a full checkpoint, starts ``scripts/vllm-cpu serve`` (dev mode, LoRA on), and registers the
three as versions. Then ``--clients`` workers send requests without pause through the service's
own ``VllmPolicy`` (3 retries with back-off), each asking for the version the ``default`` alias
names when it starts, while ``VllmSwapController`` promotes the adapter, rolls it back, stages a
second adapter (loaded and canaried ahead) and promotes it, and swaps the full checkpoint in place. Per swap it prints the controller's time, the requests that failed (after
retries) and the retried attempts during the swap, the seconds from the swap's start until the
first request for the new version went out and until its answer came back, and the median time of
any request around the swap (the new version's first answer comes one such generation after it is
asked).

The in-place path pauses the engine (new requests get 503 and are retried); inside the service no
episode meets that pause, because new episodes are held and running ones drained first. Figures
depend on the machine, which is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from machine import about

from devices.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
SERVED = "uis1-policy"
RESIZE = {"max_pixels": 64 * 28 * 28}


def uis1(*args: str) -> None:
    subprocess.run(
        [str(Path(sys.executable).with_name("uis1")), *args, "--quiet"], check=True, stdout=subprocess.DEVNULL
    )


def train_models(base: Path, work: Path, sft_given: Path | None = None) -> dict[str, Path]:
    """The SFT checkpoint (trained, or ``sft_given``: one trained the same way), a LoRA adapter on
    it, and the adapter merged into it."""
    import yaml

    from train.checkpoints import merge_adapter

    def run(name: str, body: dict[str, Any]) -> Path:
        config = work / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"output_dir": name, "resize": RESIZE, **body}), encoding="utf-8")
        uis1("train", "sft", "--config", str(config))
        return sorted((work / name / "checkpoints").glob("step-*"))[-1]

    sim = {"kind": "sim", "tasks": ["wifi_on", "bluetooth_on", "airplane_mode_on"]}
    sft = sft_given or run(
        "sft",
        {
            "model": str(base),
            "data": {"sources": [sim], "val_fraction": 0.0},
            "optim": {"lr": 3e-3},
            "batch_size": 8,
            "epochs": 100,
            "max_steps": 60,
            "save_every": 60,
        },
    )
    other = {"kind": "sim", "tasks": ["wifi_off", "bluetooth_off"]}
    adapter = run(
        "lora",
        {
            "model": str(sft),
            "data": {"sources": [other], "val_fraction": 0.0},
            "learner": {"lora": {"rank": 8, "alpha": 16}},
            "optim": {"lr": 3e-3},
            "batch_size": 8,
            "epochs": 50,
            "max_steps": 30,
            "save_every": 30,
        },
    )
    merged = merge_adapter(adapter, work / "merged")
    return {"sft": sft, "adapter": adapter, "merged": merged}


def start_vllm(model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "UIS1_SERVED_MODEL_NAME": SERVED}
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "vllm-cpu"), "serve", str(model), "--port", str(port)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit("vLLM did not become healthy in 600 s")


class RetryCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.times: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.times.append(time.monotonic())


@dataclass
class Load:
    """Workers sending requests back to back, each for the version ``default`` names at its start."""

    done: list[tuple[float, float, str, bool]] = field(default_factory=list)  # start, end, version, ok
    stop: bool = False


async def worker(load: Load, policy: Any, registry: Any, turns: Any) -> None:
    from agent.policy import SamplingSettings

    sampling = SamplingSettings(temperature=0.0, max_tokens=48)
    while not load.stop:
        version = await asyncio.to_thread(registry.promoted)
        start = time.monotonic()
        try:
            await policy.predict(turns, sampling=sampling, model=version.served_name)
            ok = True
        except Exception:
            ok = False
        load.done.append((start, time.monotonic(), version.name, ok))


async def measure(
    args: argparse.Namespace, url: str, models: dict[str, Path], work: Path
) -> list[dict[str, Any]]:
    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings
    from agent.registry import ModelRegistry
    from agent.store import TrajectoryStore
    from agent.vllm_policy import VllmPolicy, VllmSettings
    from serve.models.swap import SwapSettings, VllmSwapController, canary_turns

    store = TrajectoryStore(f"sqlite:///{work / 'bench.db'}", work / "shots")
    store.migrate()
    registry = ModelRegistry(store.engine)
    registry.register("sft", served_name=SERVED, base=str(models["sft"]), kind="base")
    registry.register("lora", base=str(models["sft"]), adapter=str(models["adapter"]), parent="sft")
    registry.register("merged", served_name=SERVED, base=str(models["merged"]), kind="full", parent="lora")
    registry.register("lora-staged", base=str(models["sft"]), adapter=str(models["adapter"]), parent="sft")
    registry.promote("sft", actor="bench")
    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    settings = VllmSettings(base_url=url, model=SERVED, timeout_s=120, max_connections=args.clients + 4)
    controller = VllmSwapController(
        store,
        registry,
        settings,
        prompt,
        SwapSettings(canary_goal="Turn on Wi-Fi", canary_max_tokens=96, hold_grace_s=0),
    )
    policy = VllmPolicy(settings, prompt=prompt)
    retries = RetryCounter()
    logging.getLogger("agent.vllm_policy").addHandler(retries)
    load = Load()
    turns = canary_turns("Turn off Wi-Fi", prompt)
    workers = [asyncio.create_task(worker(load, policy, registry, turns)) for _ in range(args.clients)]
    results = []
    await asyncio.sleep(args.warmup_s)
    for label, action in (
        ("adapter: sft -> lora", ("promote", "lora")),
        ("rollback: lora -> sft", ("rollback", None)),
        ("staged: sft -> lora-staged", ("stage", "lora-staged")),
        # Back to the base first: reloading the weights in place while requests for an adapter are
        # in flight gave an unparseable canary on the CPU server (caught, the weights put back).
        ("rollback: lora-s. -> sft", ("rollback", None)),
        ("in place: sft -> merged", ("promote", "merged")),
    ):
        staged_s = None
        if action[0] == "stage":  # loaded and canaried ahead, under the same load; then the promote
            begun = time.monotonic()
            await controller.stage(str(action[1]), actor="bench")
            staged_s = round(time.monotonic() - begun, 3)
            await asyncio.sleep(args.settle_s)
        before = len(load.done)
        start = time.monotonic()
        if action[0] in ("promote", "stage"):
            result = await controller.promote(str(action[1]), actor="bench")
        else:
            result = await controller.rollback(actor="bench")
        end = time.monotonic()
        await asyncio.sleep(args.settle_s)
        during = [d for d in load.done[before:] if d[0] <= end]
        new = [d for d in load.done if d[2] == result.version and d[0] >= start and d[3]]
        results.append(
            {
                "swap": label,
                "path": result.path,
                "swap_s": round(end - start, 3),
                "requests_during": len(during),
                "failed_during": sum(1 for d in during if not d[3]),
                "retried_attempts": sum(1 for t in retries.times if start <= t <= end + args.settle_s),
                # The first request sent to the new version, and the first answer it gave.
                "new_version_asked_after_s": round(min(d[0] for d in new) - start, 3) if new else None,
                "new_version_serving_after_s": round(min(d[1] for d in new) - start, 3) if new else None,
                "phases": {k: round(v, 3) for k, v in result.phases.items()},
                # How long any request took around the swap: the new version's first answer comes
                # one such generation after it is asked.
                "request_p50_s": round(
                    statistics.median(d[1] - d[0] for d in load.done[before:]) if load.done[before:] else 0.0,
                    3,
                ),
                **({"staged_ahead_s": staged_s} if staged_s is not None else {}),
            }
        )
    load.stop = True
    await asyncio.gather(*workers)
    await policy.aclose()
    await controller.aclose()
    total = len(load.done)
    failed = sum(1 for d in load.done if not d[3])
    results.append({"swap": "whole run", "requests": total, "failed": failed})
    store.engine.dispose()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent request loops")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=5.0, help="load kept after each swap")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--sft",
        type=Path,
        help="an SFT checkpoint of the tiny model to start from (default: train one, 60 steps)",
    )
    args = parser.parse_args()
    from agent.devkit.tiny_model import ensure_tiny_model

    print(f"machine: {about()}")
    work = Path(tempfile.mkdtemp(prefix="uis1-swap-bench-"))
    proc = None
    try:
        base = ensure_tiny_model(ROOT / ".cache")
        print("training the models (SFT, a LoRA adapter, merged) ...", flush=True)
        models = train_models(base, work, args.sft)
        print("starting vLLM ...", flush=True)
        proc, url = start_vllm(models["sft"], work / "vllm.log")
        results = asyncio.run(measure(args, url, models, work))
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{args.clients} clients, each request: one screenshot (64 image tokens), greedy, 48 tokens at most"
    )
    print(
        f"{'swap':<26} {'path':<9} {'swap s':>7} {'requests':>9} {'failed':>7} {'retried':>8} "
        f"{'new asked after s':>18} {'new answered after s':>21} {'request p50 s':>14}"
    )
    for r in results[:-1]:
        asked, answered = (
            "-" if r[k] is None else f"{r[k]:.2f}"
            for k in ("new_version_asked_after_s", "new_version_serving_after_s")
        )
        print(
            f"{r['swap']:<26} {r['path']:<9} {r['swap_s']:>7.2f} {r['requests_during']:>9} "
            f"{r['failed_during']:>7} {r['retried_attempts']:>8} {asked:>18} {answered:>21} {r['request_p50_s']:>14.2f}"
        )
    print("where a swap's seconds went:")
    for r in results[:-1]:
        print(f"  {r['swap']:<26} " + ", ".join(f"{k} {v:.2f} s" for k, v in r["phases"].items()))
    for r in results[:-1]:
        if "staged_ahead_s" in r:
            print(
                f"  {r['swap']:<26} staged ahead (load and canary, not counted above) {r['staged_ahead_s']:.2f} s"
            )
    print(f"whole run: {results[-1]['requests']} requests, {results[-1]['failed']} failed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
