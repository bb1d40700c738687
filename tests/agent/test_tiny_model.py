from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from agent.checkpoint import load_model, load_processor, vision_token_ids  # noqa: E402
from agent.devkit.tiny_model import (  # noqa: E402
    MODEL_SIZES,
    SPECIAL_TOKENS,
    TinyModelSpec,
    build_tiny_model,
    ensure_tiny_model,
)
from agent.geometry import ResizeSettings  # noqa: E402
from agent.prompt import PromptSettings, Screenshot, build_conversation, to_chat_template_input  # noqa: E402

SMALL = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_the_checkpoint_has_the_real_architecture_and_qwen_tokens(tiny_model_dir: Path) -> None:
    from transformers import Qwen2_5_VLForConditionalGeneration

    model = load_model(tiny_model_dir)
    assert isinstance(model, Qwen2_5_VLForConditionalGeneration)
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 2e6
    processor = load_processor(tiny_model_dir, SMALL.resize)
    tok = processor.tokenizer
    for token in SPECIAL_TOKENS:
        assert tok.convert_tokens_to_ids(token) < model.config.text_config.vocab_size
    assert tok.eos_token == "<|im_end|>"
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert sorted(vision_token_ids(tok)) == sorted(tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS[9:])
    # Byte-level BPE: any text, emoji and CJK included, survives encode/decode.
    text = 'Reply to Anna: "on my way" 🚗 你好 $(rm -rf /)'
    assert tok.decode(tok.encode(text)) == text


def test_the_model_generates_from_a_screenshot_prompt(tiny_model_dir: Path) -> None:
    from PIL import Image

    processor = load_processor(tiny_model_dir, SMALL.resize)
    model = load_model(tiny_model_dir)
    shot = Screenshot.from_image(Image.new("RGB", (360, 800), (200, 30, 30)))
    messages, images = to_chat_template_input(build_conversation("Open Clock", [shot], [], SMALL))
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=images, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=8, do_sample=False, suppress_tokens=vision_token_ids(processor.tokenizer)
        )
    new = out[0, inputs["input_ids"].shape[1] :]
    assert 1 <= new.numel() <= 8
    assert not set(new.tolist()) & set(vision_token_ids(processor.tokenizer))


def test_building_is_deterministic_and_cached(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = build_tiny_model(tmp_path / "again")
    assert _digest(again) == _digest(tiny_model_dir)
    cache = tiny_model_dir.parent
    assert ensure_tiny_model(cache) == tiny_model_dir
    other = TinyModelSpec(seed=1)
    assert other.key() != TinyModelSpec().key()
    with pytest.raises(FileExistsError):
        build_tiny_model(again)


def test_the_small_size_is_a_ten_million_parameter_model_that_loads_like_any_checkpoint(
    tmp_path: Path,
) -> None:
    small = build_tiny_model(tmp_path / "small", MODEL_SIZES["small"])
    model = load_model(small, dtype="float32", device="cpu")
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
    assert 9.5e6 < total < 10.5e6
    assert 1.5e6 < vision < 1.7e6
    weights = model.model.language_model.layers[0].mlp.up_proj.weight
    assert float(weights.detach().std()) == pytest.approx(0.02, rel=0.05)  # init_std, not tiny's 0.05
    assert MODEL_SIZES["tiny"] == TinyModelSpec()
