"""A rollout group's prompts generated one call each against one padded call (``generate_many``).

    .venv/bin/python benchmarks/generation.py                          # tiny and small, 6 prompts
    .venv/bin/python benchmarks/generation.py --model-size small --prompts 8 --json out.json

Within a task's group, rollouts whose histories differ have different prompts; the trainer's
in-process engine used to call ``generate`` once per distinct history and now sends them all in
one call, padded on the left. This times both on a Qwen2.5-VL built from config (``tiny`` 0.8 M or
``small`` 10 M parameters) with simulated-phone screens and histories of different lengths,
greedy (one response per prompt: greedy decoding has one answer), so both ways write the same
tokens (checked) and do the same work. Torch threads are
pinned (``--threads``); figures depend on the machine, which is printed.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from machine import facts

ROOT = Path(__file__).resolve().parent.parent


def prompts(policy: Any, count: int) -> list[Any]:
    """``count`` conversations on the simulated phone's screens, the k-th with k earlier steps."""
    from PIL import Image

    from agent.prompt import build_conversation
    from devices.sim.phone import SimPhone

    phone = SimPhone("bench", clock="09:41")
    screens = []
    for package in ("com.android.launcher3", "com.android.settings", "com.android.contacts"):
        phone.start(package)
        screens.append(Image.open(io.BytesIO(phone.screenshot_png())).convert("RGB"))
    tap = '<think>\nOpen it.\n</think>\n<action>\n{"action": "click", "coordinate": [540, 1200]}\n</action>'
    out = []
    for k in range(count):
        history = [tap.replace("540", str(100 + 40 * i)) for i in range(k % 3)]
        images = [screens[(k + i) % len(screens)] for i in range(len(history) + 1)]
        out.append(build_conversation(f"Task {k}: turn on Wi-Fi", images, history, policy.prompt))
    return out


def measure(model: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings
    from train.model import PolicyModel, Sampling

    side = int((args.image_tokens**0.5) * 28)
    resize = ResizeSettings(min_pixels=side * side, max_pixels=side * side)
    policy = PolicyModel(model, prompt=PromptSettings(resize=resize))
    greedy = Sampling(temperature=0.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    convs = prompts(policy, args.prompts)
    requests = [(turns, 1) for turns in convs]
    one_by_one, together, written = [], [], 0
    with torch.no_grad():
        for _ in range(args.repeats + 1):  # the first round warms up and is not counted
            start = time.perf_counter()
            alone = [policy.generate(turns, n, greedy) for turns, n in requests]
            one_by_one.append(time.perf_counter() - start)
            start = time.perf_counter()
            batched = policy.generate_many(requests, greedy)
            together.append(time.perf_counter() - start)
            same = all(
                a.tolist() == b.tolist()
                for group_a, group_b in zip(alone, batched, strict=True)
                for a, b in zip(group_a, group_b, strict=True)
            )
            if not same:
                raise SystemExit("the batched call wrote other tokens than the calls one by one")
            written = sum(len(t) for group in batched for t in group)
    sequential = statistics.median(one_by_one[1:])
    batched_s = statistics.median(together[1:])
    return {
        "prompts": args.prompts,
        "tokens_written": written,
        "same_tokens": same,  # every round: the batched call wrote what the calls one by one wrote
        "one_call_per_prompt_s": sequential,
        "one_call_s": batched_s,
        "speedup": sequential / batched_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-size", nargs="+", default=["tiny", "small"], choices=["tiny", "small"])
    parser.add_argument("--prompts", type=int, default=6, help="distinct histories in the group")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--image-tokens", type=int, default=64, help="image tokens per screenshot")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    import torch

    from agent.devkit.tiny_model import MODEL_SIZES, ensure_tiny_model

    torch.set_num_threads(args.threads)
    info = facts(with_torch=True)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(
        f"{args.prompts} prompts, {args.image_tokens} image tokens, greedy {args.max_new_tokens} tokens at most"
    )
    results: dict[str, Any] = {"machine": info}
    for size in args.model_size:
        found = measure(ensure_tiny_model(ROOT / ".cache", MODEL_SIZES[size]), args)
        results[size] = found
        print(
            f"{size:>6}: one call per prompt {found['one_call_per_prompt_s']:.3f} s, one padded call "
            f"{found['one_call_s']:.3f} s ({found['speedup']:.2f}x), {found['tokens_written']} tokens written",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
