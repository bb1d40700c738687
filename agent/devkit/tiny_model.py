"""A tiny, random-weight Qwen2.5-VL checkpoint built locally from config, for tests and the demo.

The real architecture classes (``Qwen2_5_VLForConditionalGeneration``), a byte-level BPE tokenizer
trained here on phone-agent text with the Qwen2.5-VL special tokens, the Qwen2-VL chat template
and a Qwen2-VL image processor, saved as an ordinary checkpoint directory. Everything downstream
(``agent.checkpoint``, vLLM, the trainer) loads it exactly as it loads UI-S1-7B; nothing needs a
model hub.

Deterministic: the same ``TinyModelSpec`` gives byte-identical files, so a directory can be cached
under the spec's hash (``ensure_tiny_model``). Building takes a few seconds on a laptop CPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.devkit.cache import publish
from agent.devkit.tiny_tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer, edit_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shapes of the tiny model. The defaults give ~0.8 M parameters and a 3 MB checkpoint;
    ``MODEL_SIZES`` names this one and a larger one."""

    seed: int = 0
    bpe_vocab: int = 1000
    model_vocab: int = 1088  # >= tokenizer size, a multiple of 64
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 256
    vision_depth: int = 2
    vision_hidden: int = 64
    vision_heads: int = 2
    vision_intermediate: int = 128
    # The processor's own defaults; callers normally override them with their ResizeSettings.
    min_pixels: int = 4 * 28 * 28
    max_pixels: int = 64 * 28 * 28
    dtype: str = "float32"
    init_std: float = 0.05  # of the random weight matrices

    def key(self) -> str:
        fields = asdict(self)
        if fields["init_std"] == 0.05:  # the key of a spec from before this field existed
            del fields["init_std"]
        blob = json.dumps({"format": 1, **fields}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# The sizes the benchmarks and tests use: "tiny" (0.8 M parameters) for everything that only needs
# the real code path, "small" (10.0 M: 7.9 M language model, 1.6 M vision tower) where a model has
# to learn something on a CPU (benchmarks/learning.py).
SMALL = TinyModelSpec(
    hidden=256,
    layers=8,
    heads=8,
    kv_heads=4,
    intermediate=1024,
    vision_depth=4,
    vision_hidden=128,
    vision_heads=4,
    vision_intermediate=512,
    init_std=0.02,
)
MODEL_SIZES: dict[str, TinyModelSpec] = {"tiny": TinyModelSpec(), "small": SMALL}


# Real checkpoints also carry these text fields at the top level, where older readers look.
TOP_LEVEL_TEXT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)


def _build_config(spec: TinyModelSpec, tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    if len(tokenizer) > spec.model_vocab:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than model_vocab={spec.model_vocab}")
    text = _text_config(spec, ids)
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=_vision_config(spec),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    for key in TOP_LEVEL_TEXT_FIELDS:
        setattr(config, key, text[key])
    config.dtype = spec.dtype
    return config


def _text_config(spec: TinyModelSpec, ids: dict[str, int]) -> dict[str, Any]:
    """The language model's config, as Qwen2.5-VL's text_config holds it."""
    head_dim = spec.hidden // spec.heads
    # M-RoPE splits the rotary half-dimensions between time, height and width.
    half = head_dim // 2
    mrope = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    return {
        "vocab_size": spec.model_vocab,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        "max_window_layers": spec.layers,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": mrope},
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": False,
    }


def _vision_config(spec: TinyModelSpec) -> dict[str, Any]:
    """The vision tower's config: Qwen2.5-VL's patching and merging, at the spec's size."""
    return {
        "depth": spec.vision_depth,
        "hidden_size": spec.vision_hidden,
        "intermediate_size": spec.vision_intermediate,
        "num_heads": spec.vision_heads,
        "in_channels": 3,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "out_hidden_size": spec.hidden,
        "fullatt_block_indexes": [spec.vision_depth - 1],
        "tokens_per_second": 2,
        "hidden_act": "silu",
    }


def _save_processor(spec: TinyModelSpec, tokenizer: Any, out: Path) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from agent.checkpoint import _image_only_processor_class

    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=spec.min_pixels,
        max_pixels=spec.max_pixels,
        patch_size=14,
        temporal_patch_size=2,
        merge_size=2,
    )
    processor = _image_only_processor_class()(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    processor.save_pretrained(out)
    # Written as the stock processor, with the video processor's settings, so that hosts with
    # torchvision (vLLM's) load it with AutoProcessor; ``agent.checkpoint.load_processor`` handles
    # hosts without. The video section is what Qwen2VLVideoProcessor saves for these sizes.
    video = {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "do_sample_frames": False,
        "image_mean": list(image_processor.image_mean),
        "image_std": list(image_processor.image_std),
        "max_frames": 768,
        "max_video_tokens": 128000,
        "merge_size": 2,
        "min_frames": 4,
        "patch_size": 14,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "return_metadata": False,
        "size": {"longest_edge": spec.max_pixels * 2, "shortest_edge": spec.min_pixels},
        "temporal_patch_size": 2,
        "video_processor_type": "Qwen2VLVideoProcessor",
    }
    edit_json(out / "processor_config.json", processor_class="Qwen2_5_VLProcessor", video_processor=video)
    edit_json(
        out / "tokenizer_config.json", tokenizer_class="Qwen2Tokenizer", drop=("is_local", "local_files_only")
    )


def _random_weights(model: Any, seed: int, std: float) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1 and ("norm" in name or "ln_q" in name):
                param.fill_(1.0)  # RMSNorm scales
            elif param.dim() == 1:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def build_tiny_model(out: Path, spec: TinyModelSpec | None = None) -> Path:
    """Write a tiny Qwen2.5-VL checkpoint into ``out`` (created; must be empty or absent)."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    spec = spec or TinyModelSpec()
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    torch.manual_seed(spec.seed)
    tokenizer = build_tokenizer(spec.bpe_vocab, spec.seed, out)
    config = _build_config(spec, tokenizer)
    _save_processor(spec, tokenizer, out)
    model = Qwen2_5_VLForConditionalGeneration(config)
    _random_weights(model, spec.seed, spec.init_std)
    model = model.to(getattr(torch, spec.dtype))
    model.generation_config.do_sample = False
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.save_pretrained(out)
    (out / "tiny_model_spec.json").write_text(json.dumps(asdict(spec), indent=2, sort_keys=True) + "\n")
    return out


def ensure_tiny_model(cache_dir: Path, spec: TinyModelSpec | None = None) -> Path:
    """The tiny model for ``spec`` under ``cache_dir``, built once (atomically) and then reused."""
    spec = spec or TinyModelSpec()
    target = cache_dir / f"tiny-qwen25vl-{spec.key()}"
    if (target / "tiny_model_spec.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_dir))
    log.info("building the tiny model %s (tokenizer, config, random weights; seconds)", target.name)
    try:
        build_tiny_model(staging / "model", spec)
        publish(staging / "model", target, "tiny_model_spec.json")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
