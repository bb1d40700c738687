"""Several samples in one forward pass: the log-prob, reference and update passes in micro-batches.

One sample at a time, a GPU spends a step launching kernels for one short sequence; a micro-batch
runs the samples of one group (the same task, prompts of similar length) together. Sequences are
padded on the left, so every one ends at the last position and a single window of logits (the
longest response plus one) covers every response; the attention mask keeps the padding out of
attention and Qwen2.5-VL's 3-D positions, so each sample's log-probs are the ones it gets alone
(``tests/train/test_batching.py`` compares them token by token). Screens travel as one
concatenation of every sample's patches, in order, as the model's vision tower expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from train.model import PolicyModel, Sample


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """``items`` in consecutive runs of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), max(1, size))]


def logprobs_batch(
    policy: PolicyModel, samples: Sequence[Sample], *, entropy: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """``policy.logprobs`` of each sample, computed in one forward pass."""
    if len(samples) == 1:
        return [policy.logprobs(samples[0], entropy=entropy)]
    device = samples[0].prompt_ids.device
    sequences = [torch.cat([s.prompt_ids, s.response_ids]) for s in samples]
    width = max(len(seq) for seq in sequences)
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(samples), width), int(pad), dtype=torch.long, device=device)
    mask = torch.zeros((len(samples), width), dtype=torch.long, device=device)
    typed = [s.mm_token_type_ids for s in samples if s.mm_token_type_ids is not None]
    types = torch.zeros((len(samples), width), dtype=typed[0].dtype, device=device) if typed else None
    for row, (sample, seq) in enumerate(zip(samples, sequences, strict=True)):
        start = width - len(seq)
        ids[row, start:] = seq
        mask[row, start:] = 1
        if types is not None and sample.mm_token_type_ids is not None:
            types[row, start : start + len(sample.prompt_ids)] = sample.mm_token_type_ids
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
    pixels = [s.pixel_values for s in samples if s.pixel_values is not None]
    if pixels:
        kwargs["pixel_values"] = torch.cat(pixels)
        kwargs["image_grid_thw"] = torch.cat(
            [s.image_grid_thw for s in samples if s.image_grid_thw is not None]
        )
    if types is not None:
        kwargs["mm_token_type_ids"] = types
    if policy.adapter_names is not None:
        kwargs["adapter_names"] = policy.adapter_names * len(samples)
    keep = max(s.response_len for s in samples) + 1
    # Logits at position p predict token p+1; with left padding every response ends at the last
    # position, so the last ``keep`` positions hold every response's predictions.
    logits = policy.model(**kwargs, logits_to_keep=keep).logits.float()
    out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for row, sample in enumerate(samples):
        n = sample.response_len
        log_probs = torch.log_softmax(logits[row, keep - 1 - n : keep - 1], dim=-1)
        chosen = log_probs.gather(1, sample.response_ids.unsqueeze(1)).squeeze(1)
        ent = None
        if entropy:
            with torch.no_grad():
                ent = -(log_probs.exp() * log_probs).sum(-1)
        out.append((chosen, ent))
    return out
