"""The tiny model's tokenizer: Qwen2.5-VL's special tokens, chat template and pre-tokenisation,
with a byte-level BPE vocabulary trained here on a corpus of the prompt's and the answers' own
text (no model hub needed)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agent.actions import ACTION_TYPES
from agent.prompt import ANSWER_NOTE, FORMAT_REMINDER, SYSTEM_PROMPT

# Qwen2.5-VL's special tokens, in the real tokenizer's relative order.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# The Qwen2-VL / Qwen2.5-VL chat template, as the released checkpoints ship it.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2's pre-tokenisation split.
QWEN2_SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


APPS = ("Settings", "Contacts", "Messages", "Clock", "Notes", "Browser", "Shop", "Files", "Camera")
# Words of goals, thoughts and screens, for the merges.
WORDS = (
    "turn",
    "on",
    "off",
    "Wi-Fi",
    "Bluetooth",
    "brightness",
    "dark",
    "mode",
    "alarm",
    "reply",
    "to",
    "Anna",
    "send",
    "message",
    "search",
    "for",
    "open",
    "the",
    "app",
    "add",
    "to",
    "cart",
    "checkout",
    "name",
    "address",
    "save",
    "delete",
    "back",
    "home",
    "scroll",
    "down",
    "up",
    "list",
    "item",
    "button",
    "menu",
    "settings",
    "network",
    "battery",
    "display",
    "sound",
    "notification",
    "contact",
    "call",
    "new",
    "note",
    "title",
)


def corpus(seed: int) -> list[str]:
    """Text the tokenizer learns its merges from: the prompt, responses and phone-screen words."""
    rng = random.Random(seed)
    lines = [SYSTEM_PROMPT, FORMAT_REMINDER, ANSWER_NOTE]
    for i in range(1500):
        action = ACTION_TYPES[i % len(ACTION_TYPES)]
        name = action.model_fields["action"].default
        think = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        args = {
            "coordinate": [rng.randint(0, 1092), rng.randint(0, 2408)],
            "coordinate2": [rng.randint(0, 1092), rng.randint(0, 2408)],
            "text": rng.choice(APPS) if name == "open" else " ".join(rng.sample(WORDS, 3)),
            "time": rng.randint(1, 5),
            "button": rng.choice(["Back", "Home", "Menu", "Enter"]),
            "status": rng.choice(["success", "failure"]),
        }
        body = json.dumps({"action": name, **{a: args[a] for a in action.arguments}})
        lines.append(f"<think>\n{think}\n</think>\n<action>\n{body}\n</action>")
        lines.append(f"User Instruction: {rng.choice(WORDS)} {rng.choice(APPS)} {i}")
    lines.append(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 !?.,;:'\"()[]{}<>/\\|@#$%^&*-_=+~`"
    )
    return lines


def build_tokenizer(vocab: int, seed: int, out: Path) -> Any:
    """A byte-level BPE tokenizer with Qwen2's pre-tokenisation, special tokens and chat template,
    trained on ``corpus(seed)`` and saved under ``out`` in the real tokenizer's layout."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    edit_json(
        out / "tokenizer_config.json",
        tokenizer_class="Qwen2Tokenizer",
        errors="replace",
        add_prefix_space=False,
    )
    return AutoTokenizer.from_pretrained(out)


def edit_json(path: Path, drop: tuple[str, ...] = (), **updates: Any) -> None:
    data = json.loads(path.read_text())
    for key in drop:
        data.pop(key, None)
    data.update(updates)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
