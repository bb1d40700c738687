"""The policy as the trainer holds it: a Qwen2.5-VL checkpoint, its processor, and the three things
training asks of it: tokenised samples, response log-probabilities and sampled responses.

A sample is one step of one rollout: the prompt (system, goal, history, the last two screenshots,
exactly as serving builds it through ``agent.prompt``) and a response as token ids ending with the
end-of-turn token. Forward passes run one sample at a time (the paper's micro-batch of 1) and keep
logits only for the response positions, so memory grows with the response, not the vocabulary
times the prompt (152k x 4k logits of a 7B prompt would not fit).

LoRA (PEFT) adapters sit on the language model's projections only, never on the vision tower.
The frozen reference policy of the KL term is the policy a run started from: with a fresh adapter
it is the same weights with the adapter switched off; when the run continues an adapter it is a
frozen second copy of that starting adapter on the same base (``reference_adapter_dir``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from agent.checkpoint import load_model, load_processor, vision_token_ids, write_system_prompt
from agent.prompt import PromptSettings, Turn, to_chat_template_input

END_OF_TURN = "<|im_end|>"
PROCESSOR_FILES = ("*token*", "*processor*config.json", "chat_template.*", "vocab.json", "merges.txt")
# The language model's projections (PEFT module names of transformers 5: model.language_model.*),
# so an adapter never touches the vision tower.
LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
TRAINED_ADAPTER = "default"  # PEFT's name for the adapter it creates or loads first
REFERENCE_ADAPTER = "reference"
BASE_ONLY = "__base__"  # PEFT's name for "no adapter" in a forward's adapter_names


class LoraSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str = LORA_TARGETS


@dataclass
class Sample:
    prompt_ids: torch.Tensor  # [prompt_len], image pads expanded
    response_ids: torch.Tensor  # [response_len], ending with the end-of-turn token when it was produced
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    # Which prompt tokens are image tokens: without it the model cannot build Qwen2.5-VL's 3-D
    # (M-RoPE) positions and silently falls back to 1-D ones, unlike generation and vLLM.
    mm_token_type_ids: torch.Tensor | None = None

    @property
    def response_len(self) -> int:
        return int(self.response_ids.numel())


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512


class PolicyModel:
    def __init__(
        self,
        model_dir: str | Path,
        *,
        prompt: PromptSettings | None = None,
        lora: LoraSettings | None = None,
        adapter_dir: str | Path | None = None,
        reference_adapter_dir: str | Path | None = None,
        gradient_checkpointing: bool = False,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        self.model_dir = Path(model_dir)
        self.prompt = prompt or PromptSettings()
        self.device = torch.device(device)
        self.processor = load_processor(model_dir, self.prompt.resize)
        self.tokenizer = self.processor.tokenizer
        model = load_model(model_dir, dtype=dtype, device=device)
        self.lora = lora
        if adapter_dir is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
            if reference_adapter_dir is not None:
                model.load_adapter(
                    str(reference_adapter_dir), adapter_name=REFERENCE_ADAPTER, is_trainable=False
                )
        elif lora is not None:
            from peft import LoraConfig, get_peft_model

            config = LoraConfig(
                r=lora.rank,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=lora.target_modules,
                bias="none",
            )
            model = get_peft_model(model, config)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()
        self.model: Any = model
        self.has_reference_adapter = adapter_dir is not None and reference_adapter_dir is not None
        self._adapter_names: list[str] | None = None  # set inside ``reference()``
        self.end_of_turn = int(self.tokenizer.convert_tokens_to_ids(END_OF_TURN))
        self.suppress = vision_token_ids(self.tokenizer)

    @property
    def has_adapter(self) -> bool:
        return hasattr(self.model, "disable_adapter")

    @property
    def reference_kind(self) -> str:
        """What ``reference()`` computes with: the starting adapter's frozen copy, the base without
        the adapter, or (no adapter) nothing: a full fine-tune needs a separate reference model."""
        if self.has_reference_adapter:
            return "starting_adapter"
        return "base_without_adapter" if self.has_adapter else "none"

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for p in self.model.parameters() if p.requires_grad)

    # -- samples ----------------------------------------------------------------------------------
    def encode_prompt(self, turns: Sequence[Turn]) -> dict[str, torch.Tensor]:
        messages, images = to_chat_template_input(turns)
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        encoded = self.processor(text=[text], images=images or None, return_tensors="pt")
        return {k: v.to(self.device) for k, v in encoded.items()}

    def response_ids(self, text: str) -> torch.Tensor:
        """Token ids of a response written as text (expert responses, vLLM samples), end-of-turn added."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor([*ids, self.end_of_turn], dtype=torch.long, device=self.device)

    def sample(self, turns: Sequence[Turn], response: str | torch.Tensor) -> Sample:
        encoded = self.encode_prompt(turns)
        ids = self.response_ids(response) if isinstance(response, str) else response.to(self.device)
        types = encoded.get("mm_token_type_ids")
        return Sample(
            encoded["input_ids"][0],
            ids,
            encoded.get("pixel_values"),
            encoded.get("image_grid_thw"),
            None if types is None else types[0],
        )

    def decode(self, ids: torch.Tensor) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    @property
    def adapter_names(self) -> list[str] | None:
        """PEFT's per-forward adapter choice while inside ``reference()`` (None: the trained one)."""
        return self._adapter_names

    # -- log-probabilities -------------------------------------------------------------------------
    def logprobs(self, sample: Sample, *, entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log π(token) of each response token [response_len], and optionally the entropy per token."""
        ids = torch.cat([sample.prompt_ids, sample.response_ids]).unsqueeze(0)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if sample.pixel_values is not None:
            kwargs.update(pixel_values=sample.pixel_values, image_grid_thw=sample.image_grid_thw)
        if self._adapter_names is not None:
            kwargs["adapter_names"] = self._adapter_names
        if sample.mm_token_type_ids is not None:
            response_types = torch.zeros_like(sample.response_ids, dtype=sample.mm_token_type_ids.dtype)
            kwargs["mm_token_type_ids"] = torch.cat([sample.mm_token_type_ids, response_types]).unsqueeze(0)
        n = sample.response_len
        # Logits at position p predict token p+1: keep the n positions before the response's end.
        logits = self.model(**kwargs, logits_to_keep=n + 1).logits[0, :-1].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        chosen = log_probs.gather(1, sample.response_ids.unsqueeze(1)).squeeze(1)
        ent = None
        if entropy:
            with torch.no_grad():
                ent = -(log_probs.exp() * log_probs).sum(-1)
        return chosen, ent

    @contextmanager
    def reference(self) -> Iterator[None]:
        """Forward passes inside run the frozen starting policy: the starting adapter's copy, or the
        base with the adapter off. PEFT's per-forward ``adapter_names`` selects it without touching
        which adapter trains (``set_adapter`` would flip ``requires_grad``); it needs eval mode."""
        if not self.has_adapter:
            raise RuntimeError("a model without an adapter has no built-in reference")
        if self.model.training:
            raise RuntimeError("reference log-probs are computed in eval mode")
        self._adapter_names = [REFERENCE_ADAPTER if self.has_reference_adapter else BASE_ONLY]
        try:
            yield
        finally:
            self._adapter_names = None

    # -- sampling ----------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self, turns: Sequence[Turn], n: int, sampling: Sampling, *, seed: int | None = None
    ) -> list[torch.Tensor]:
        """``n`` responses to one prompt, as token ids (end-of-turn kept when produced)."""
        inputs = self.encode_prompt(turns)
        out = self._generate(inputs, sampling, seed=seed, num_return_sequences=n)
        return self._responses(out[:, inputs["input_ids"].shape[1] :])

    def generate_many(
        self, requests: Sequence[tuple[Sequence[Turn], int]], sampling: Sampling, *, seed: int | None = None
    ) -> list[list[torch.Tensor]]:
        """``n`` responses to each of several prompts in one ``generate`` call: the prompts padded
        on the left (``train.batching.left_padded``), each repeated ``n`` times. Greedy, each prompt
        gets the tokens it gets alone (``tests/train/test_batching.py``)."""
        from train.batching import left_padded

        if len(requests) == 1:
            turns, n = requests[0]
            return [self.generate(turns, n, sampling, seed=seed)]
        encoded = [self.encode_prompt(turns) for turns, _ in requests]
        rows = [enc for enc, (_, n) in zip(encoded, requests, strict=True) for _ in range(n)]
        inputs = left_padded(self, rows)
        out = self._generate(inputs, sampling, seed=seed, num_return_sequences=1)
        responses = self._responses(out[:, inputs["input_ids"].shape[1] :])
        grouped, start = [], 0
        for _, n in requests:
            grouped.append(responses[start : start + n])
            start += n
        return grouped

    def _generate(
        self,
        inputs: dict[str, torch.Tensor],
        sampling: Sampling,
        *,
        seed: int | None,
        num_return_sequences: int,
    ) -> torch.Tensor:
        greedy = sampling.temperature == 0.0
        if seed is not None:
            torch.manual_seed(seed)
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "do_sample": not greedy,
            "num_return_sequences": num_return_sequences,
            "suppress_tokens": self.suppress,
            "eos_token_id": self.end_of_turn,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if greedy:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        was_training = self.model.training
        self.model.eval()
        try:
            return self.model.generate(**inputs, **kwargs)  # type: ignore[no-any-return]
        finally:
            self.model.train(was_training)

    def _responses(self, generated: torch.Tensor) -> list[torch.Tensor]:
        """Each row's response: up to and with its end-of-turn, else without the padding."""
        responses = []
        for row in generated:
            ends = (row == self.end_of_turn).nonzero()
            cut = int(ends[0]) + 1 if ends.numel() else int((row != self.tokenizer.pad_token_id).sum())
            responses.append(row[:cut].clone())
        return responses

    # -- saving ------------------------------------------------------------------------------------
    def save(self, out_dir: Path, *, merged: bool = False) -> None:
        """A Hugging Face checkpoint: the adapter alone (or merged into the base), or the full model."""
        out_dir.mkdir(parents=True, exist_ok=True)
        write_system_prompt(out_dir, self.prompt.system_prompt)  # served with the prompt it learned
        model = self.model
        if self.has_adapter and merged:
            import copy

            model = copy.deepcopy(model).merge_and_unload(adapter_names=[TRAINED_ADAPTER])
            model.save_pretrained(str(out_dir), safe_serialization=True)
        elif self.has_adapter:  # the trained adapter only, never the frozen reference copy
            model.save_pretrained(str(out_dir), safe_serialization=True, selected_adapters=[TRAINED_ADAPTER])
        else:
            model.save_pretrained(str(out_dir), safe_serialization=True)
        if not (self.has_adapter and not merged):
            # Training never changes the tokenizer or the processor: carry the source checkpoint's
            # files over as they are, so every loader (vLLM's AutoProcessor included) reads them.
            for pattern in PROCESSOR_FILES:
                for path in self.model_dir.glob(pattern):
                    if path.is_file():
                        shutil.copy2(path, out_dir / path.name)
