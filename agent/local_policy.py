"""``LocalPolicy``: the policy run in-process with transformers (CPU or GPU).

Loads any Qwen2.5-VL checkpoint directory in Hugging Face format through ``agent.checkpoint``,
optionally with a PEFT (LoRA) adapter on top. Generation runs in a worker thread, one request at a
time per model (a model instance is not safe to share between concurrent generate calls). Used for
development, CPU-only hosts and the trainer's rollouts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.checkpoint import load_model, load_processor, vision_token_ids
from agent.policy import PolicyRejected, PolicyResult, SamplingSettings
from agent.prompt import PromptSettings, Turn, to_chat_template_input


class LocalPolicy:
    def __init__(
        self,
        model_dir: str | Path,
        *,
        adapter_dir: str | Path | None = None,
        model_version: str | None = None,
        prompt: PromptSettings | None = None,
        sampling: SamplingSettings | None = None,
        device: str = "cpu",
        dtype: str = "auto",
    ) -> None:
        self.prompt = prompt or PromptSettings()
        self.sampling = sampling or SamplingSettings()
        self.weights = (str(model_dir), str(adapter_dir) if adapter_dir is not None else None)
        self.processor = load_processor(model_dir, self.prompt.resize)
        model = load_model(model_dir, dtype=dtype, device=device)
        if adapter_dir is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter_dir))
            model.eval()
        self.model = model
        self.device = device
        self._version = model_version or Path(adapter_dir or model_dir).name
        self._suppress = vision_token_ids(self.processor.tokenizer)
        self._lock = asyncio.Lock()

    @property
    def model_version(self) -> str:
        return self._version

    def encode(self, turns: Sequence[Turn]) -> Any:
        """The model inputs for a conversation, with the generation prompt appended."""
        messages, images = to_chat_template_input(turns)
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.processor(text=[text], images=images or None, return_tensors="pt").to(self.device)

    def _generate(self, turns: Sequence[Turn], sampling: SamplingSettings) -> PolicyResult:
        import torch

        start = time.perf_counter()
        inputs = self.encode(turns)
        greedy = sampling.temperature == 0.0
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "do_sample": not greedy,
            "suppress_tokens": self._suppress,
            "return_dict_in_generate": True,
            "output_scores": sampling.logprobs,
        }
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = out.sequences[0, prompt_len:]
        raw = self.processor.tokenizer.decode(new_tokens, skip_special_tokens=True)
        logprobs = None
        if sampling.logprobs:
            scores = torch.stack(out.scores, dim=0)[:, 0, :].float().log_softmax(-1)
            logprobs = scores.gather(1, new_tokens[: scores.shape[0]].unsqueeze(1)).squeeze(1).tolist()
        return PolicyResult.from_text(
            raw,
            model_version=self._version,
            prompt_tokens=int(prompt_len),
            completion_tokens=int(new_tokens.numel()),
            latency_s=time.perf_counter() - start,
            logprobs=logprobs,
        )

    def score_tail(self, turns: Sequence[Turn], count: int) -> list[float]:
        """Log-probabilities of the last ``count`` tokens of a conversation that ends with an
        assistant turn, under teacher forcing (the chat template continues that turn, as vLLM's
        ``continue_final_message`` does): what ``agent.fingerprint`` compares."""
        import torch

        messages, images = to_chat_template_input(turns)
        text = self.processor.apply_chat_template(messages, continue_final_message=True, tokenize=False)
        inputs = self.processor(text=[text], images=images or None, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            logits = self.model(**inputs).logits[0, -count - 1 : -1].float()
        targets = inputs["input_ids"][0, -count:]
        return logits.log_softmax(-1).gather(1, targets.unsqueeze(1)).squeeze(1).tolist()  # type: ignore[no-any-return]

    async def score(self, turns: Sequence[Turn], count: int) -> list[float]:
        async with self._lock:
            return await asyncio.to_thread(self.score_tail, turns, count)

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        if model is not None and model != self._version:
            raise PolicyRejected(f"this local policy serves {self._version!r} only, not {model!r}")
        async with self._lock:
            return await asyncio.to_thread(self._generate, turns, sampling or self.sampling)

    async def aclose(self) -> None:
        return None


class LocalModels:
    """Several model versions in one process, each under its served name: the in-process engine
    that hot swaps load into (``serve.models.swap.LocalSwapController``), as vLLM holds several adapters.

    ``predict(model=NAME)`` answers with that version, ``model=None`` with the default one. Loading
    happens beside the versions already serving (each keeps its own weights, so memory grows with
    every version loaded until the old ones are unloaded); the version a request picked keeps
    answering it however the set changes meanwhile.
    """

    def __init__(self, first: LocalPolicy) -> None:
        self._models: dict[str, LocalPolicy] = {first.model_version: first}
        self._paths: dict[str, tuple[str, str | None]] = {first.model_version: first.weights}
        self._default = first.model_version
        self.prompt = first.prompt
        self.sampling = first.sampling
        self.device = first.device

    @property
    def model_version(self) -> str:
        return self._default

    def served_models(self) -> list[str]:
        return list(self._models)

    def holds(self, name: str) -> tuple[str, str | None] | None:
        """(checkpoint, adapter) of the version served as ``name``; None when none is."""
        return self._paths.get(name)

    def load(self, name: str, checkpoint: str | Path, adapter: str | Path | None = None) -> None:
        """Load a version under ``name`` (blocking: call it off the event loop)."""
        if name in self._models:
            raise ValueError(f"a version is already served as {name!r}; unload it first")
        from transformers.utils import logging as transformers_logging

        # A service's log is no place for a progress bar.
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        policy = LocalPolicy(
            checkpoint,
            adapter_dir=adapter,
            model_version=name,
            prompt=self.prompt,
            sampling=self.sampling,
            device=self.device,
        )
        self._models[name] = policy
        self._paths[name] = policy.weights

    def unload(self, name: str) -> None:
        if name == self._default:
            raise ValueError(f"{name!r} is the default version; make another the default first")
        self._models.pop(name, None)
        self._paths.pop(name, None)

    def set_default(self, name: str) -> None:
        if name not in self._models:
            raise ValueError(f"no version is served as {name!r}")
        self._default = name

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        policy = self._models.get(model or self._default)
        if policy is None:
            # A 4xx, as vLLM answers a model it does not serve: the request named it, nothing failed.
            raise PolicyRejected(
                f"no version is served as {model!r} here (serving: {', '.join(self._models)})"
            )
        return await policy.predict(turns, sampling=sampling)

    async def score(self, turns: Sequence[Turn], count: int, *, model: str) -> list[float]:
        """``LocalPolicy.score_tail`` with the version served as ``model``."""
        policy = self._models.get(model)
        if policy is None:
            raise PolicyRejected(
                f"no version is served as {model!r} here (serving: {', '.join(self._models)})"
            )
        return await policy.score(turns, count)

    async def health(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None
