"""The nightly job on paper: SFT and semi-online RL of UI-S1-7B on one 8-GPU node, estimated.

    .venv/bin/python benchmarks/nightly.py                 # the estimate for 8 x H100 and 8 x H200
    .venv/bin/python benchmarks/nightly.py --json          # the same, for scripts
    .venv/bin/python benchmarks/nightly.py --max-pixels 1003520 --lora   # what a setting changes

Nothing here runs on a GPU. The prompt is measured: it is built by the service's own prompt code
(``agent.prompt.build_conversation``) for a 1080x2400 screen at the paper's resize limits, so the
image tokens per screenshot and the characters of the fixed text are exact; text characters are
turned into tokens at ``--chars-per-token`` (Qwen's tokenizer on English prose gives about four).
Model shapes are Qwen2.5-VL-7B's published configuration; the GPUs' peak BF16 dense throughput and
memory bandwidth are the vendor's datasheet figures; the fraction of peak reached (MFU) is an
assumption, stated in the output and settable.

The arithmetic, for each training sample (one step of one rollout):

- **prefill and training FLOPs**: 2 x parameters x tokens for a forward pass of the language model,
  plus its attention (4 x layers x hidden x context per token), plus the vision tower over each
  image's patches (four patches per image token); a backward pass costs twice a forward one.
- **rollout**: a forward over the prompt (prefill, compute-bound) and the response decoded token
  by token (memory-bound: each decode step reads the weights once for the whole batch and every
  sequence's key-value cache); the batch is what fits in vLLM's share of memory.
- **update**: the old and the reference log-probs are forward passes, the update a forward and a
  backward; with LoRA the weights' own gradients are skipped (about a third of the backward).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from dataclasses import asdict, dataclass
from typing import Any

# Qwen2.5-VL-7B-Instruct (config.json): language model and vision tower.
LM_PARAMS = 7.07e9  # without the vision tower
VISION_PARAMS = 0.675e9
LAYERS = 28
HIDDEN = 3584
KV_HEADS, HEAD_DIM = 4, 128
BYTES = 2  # bf16
GPUS = {  # peak dense BF16 FLOP/s, HBM bytes/s, memory bytes (vendor datasheets, SXM)
    "H100": (989e12, 3.35e12, 80e9),
    "H200": (989e12, 4.8e12, 141e9),
}


@dataclass(frozen=True)
class Workload:
    trajectories: int = 1000
    steps: float = 5.5  # mean expert steps per trajectory
    n: int = 8  # rollouts per task
    epochs: int = 5
    response_tokens: int = 120  # one response: thought and action
    max_pixels: int = 12800 * 28 * 28  # the paper's resize limit (native resolution for phones)
    chars_per_token: float = 4.0
    survival: float = 1.0  # share of rollout steps reached (a mismatch past the patches ends one)
    mfu_train: float = 0.35
    mfu_prefill: float = 0.5
    vllm_memory: float = 0.6  # vLLM's gpu_memory_utilization, as the paper's recipe sets it
    lora: bool = False
    gpus: int = 8


def prompt_tokens(work: Workload) -> dict[str, Any]:
    """Tokens of the prompt at a mean step, from the service's own prompt for a 1080x2400 screen."""
    from PIL import Image

    from agent.geometry import ResizeSettings, Size, image_tokens, smart_resize
    from agent.prompt import PromptSettings, TextPart, build_conversation

    resize = ResizeSettings(max_pixels=work.max_pixels)
    resized = smart_resize(Size(1080, 2400), resize)
    tokens = image_tokens(Size(1080, 2400), resize)
    settings = PromptSettings(resize=resize)
    blank = Image.new("RGB", (8, 8))
    turns = build_conversation("Reply to Anna's last message with 'on my way'", [blank], [], settings)
    fixed_chars = sum(len(p.text) for t in turns for p in t.parts if isinstance(p, TextPart))
    mean_history = (work.steps - 1) / 2  # responses before a mean step
    shown = sum(min(settings.image_limit, i + 1) for i in range(math.ceil(work.steps))) / math.ceil(
        work.steps
    )
    text = fixed_chars / work.chars_per_token + mean_history * work.response_tokens
    return {
        "image_tokens_per_screenshot": tokens,
        "resized": [resized.width, resized.height],
        "fixed_text_chars": fixed_chars,
        "screenshots_per_prompt": shown,
        "prompt_tokens": text + shown * tokens,
        "image_share": shown * tokens / (text + shown * tokens),
    }


def forward_flops(tokens: float, context: float, image_tokens: float) -> float:
    """One forward pass over ``tokens`` with attention over ``context``, and the vision tower over
    ``image_tokens`` worth of patches (four patches per token)."""
    language = 2 * LM_PARAMS * tokens + 4 * LAYERS * HIDDEN * context * tokens
    vision = 2 * VISION_PARAMS * 4 * image_tokens
    return language + vision


def estimate(work: Workload, gpu: str) -> dict[str, Any]:
    peak, bandwidth, memory = GPUS[gpu]
    prompt = prompt_tokens(work)
    p, r = prompt["prompt_tokens"], work.response_tokens
    images = prompt["screenshots_per_prompt"] * prompt["image_tokens_per_screenshot"]
    compute = work.gpus * peak
    # semi-online RL: every rollout step is one sample
    samples = work.trajectories * work.n * work.steps * work.survival
    prefill = samples * forward_flops(p, p / 2, images)
    # decode: weights once per step for the batch, each sequence's KV cache once per token
    kv_per_token = LAYERS * 2 * KV_HEADS * HEAD_DIM * BYTES
    weights = (LM_PARAMS + VISION_PARAMS) * BYTES
    kv_room = memory * work.vllm_memory - weights
    batch = max(1, int(kv_room / (kv_per_token * (p + r))))
    step_s = (weights + batch * kv_per_token * (p + r / 2)) / bandwidth
    decode_s = samples * r / (batch / step_s) / work.gpus
    rollout_s = prefill / (compute * work.mfu_prefill) + decode_s
    sample = forward_flops(p + r, (p + r) / 2, images)
    backward = 2 * sample * (2 / 3 if work.lora else 1)
    update_flops = samples * (2 * sample + sample + backward)  # old and reference log-probs, update
    update_s = update_flops / (compute * work.mfu_train)
    rl_epoch = rollout_s + update_s
    sft_samples = work.trajectories * work.steps
    sft_epoch = sft_samples * (sample + backward) / (compute * work.mfu_train)
    return {
        "gpu": f"{work.gpus} x {gpu}",
        "prompt": prompt,
        "rl": {
            "samples_per_epoch": samples,
            "rollout_prefill_h": prefill / (compute * work.mfu_prefill) / 3600,
            "rollout_decode_h": decode_s / 3600,
            "decode_batch_per_gpu": batch,
            "update_h": update_s / 3600,
            "epoch_h": rl_epoch / 3600,
            "total_h": work.epochs * rl_epoch / 3600,
        },
        "sft": {
            "samples_per_epoch": sft_samples,
            "epoch_h": sft_epoch / 3600,
            "total_h": work.epochs * sft_epoch / 3600,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Workload()
    for name, value in asdict(defaults).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true", default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    parser.add_argument("--json", action="store_true", dest="as_json")
    args = vars(parser.parse_args())
    as_json = args.pop("as_json")
    work = Workload(**args)
    results = [estimate(work, gpu) for gpu in GPUS]
    if as_json:
        print(json.dumps({"workload": asdict(work), "estimates": results}, indent=2))
        return
    prompt = results[0]["prompt"]
    print(f"machine: none needed (arithmetic; Python {platform.python_version()})")
    print(
        f"workload: {work.trajectories} trajectories x {work.steps} steps, N = {work.n}, {work.epochs} epochs"
        f"{', LoRA' if work.lora else ', full weights'}; MFU {work.mfu_train:.0%} training, "
        f"{work.mfu_prefill:.0%} prefill"
    )
    print(
        f"prompt at a mean step: {prompt['prompt_tokens']:.0f} tokens, {prompt['image_share']:.0%} of them image "
        f"({prompt['screenshots_per_prompt']:.2f} screenshots x {prompt['image_tokens_per_screenshot']} tokens, "
        f"1080x2400 resized to {prompt['resized'][0]}x{prompt['resized'][1]}); response {work.response_tokens} tokens"
    )
    for result in results:
        rl, sft = result["rl"], result["sft"]
        print(
            f"{result['gpu']}: semi-online RL {rl['total_h']:.1f} h ({rl['epoch_h']:.2f} h an epoch: rollout prefill "
            f"{rl['rollout_prefill_h']:.2f} h, decode {rl['rollout_decode_h']:.2f} h at {rl['decode_batch_per_gpu']} "
            f"sequences per GPU, update {rl['update_h']:.2f} h); SFT {sft['total_h']:.2f} h"
        )


if __name__ == "__main__":
    main()
