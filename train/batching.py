"""Several samples in one forward pass: the log-prob, reference and update passes in micro-batches.

One sample at a time, a GPU spends a step launching kernels for one short sequence; a micro-batch
runs the samples of one group (the same task, prompts of similar length) together. Sequences are
padded on the left, so every one ends at the last position and a single window of logits (the
longest response plus one) covers every response; the attention mask keeps the padding out of
attention and Qwen2.5-VL's 3-D positions, so each sample's log-probs are the ones it gets alone
(``tests/train/test_batching.py`` compares them token by token). Screens travel as one
concatenation of every sample's patches, in order, as the model's vision tower expects.

Generation pads the same way (``left_padded``): a group's prompts go to one ``generate`` call
(``PolicyModel.generate_many``) and each gets, greedy, the tokens it gets alone.
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
    kwargs = _padded(
        policy,
        [torch.cat([s.prompt_ids, s.response_ids]) for s in samples],
        [s.mm_token_type_ids for s in samples],
        [s.pixel_values for s in samples],
        [s.image_grid_thw for s in samples],
    )
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


def left_padded(policy: PolicyModel, prompts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Encoded prompts (``policy.encode_prompt``, one row each) as one left-padded batch for
    ``generate``: every prompt ends at the last position, where generation goes on."""
    return _padded(
        policy,
        [p["input_ids"][0] for p in prompts],
        [p["mm_token_type_ids"][0] if "mm_token_type_ids" in p else None for p in prompts],
        [p.get("pixel_values") for p in prompts],
        [p.get("image_grid_thw") for p in prompts],
    )


def _padded(
    policy: PolicyModel,
    sequences: Sequence[torch.Tensor],
    types: Sequence[torch.Tensor | None],
    pixels: Sequence[torch.Tensor | None],
    grids: Sequence[torch.Tensor | None],
) -> dict[str, Any]:
    """The model's inputs for sequences of different lengths, padded on the left: ids, the
    attention mask, the token types (over each sequence's own start; the rest text), and every
    sequence's screens in order."""
    device = sequences[0].device
    width = max(len(seq) for seq in sequences)
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(sequences), width), int(pad), dtype=torch.long, device=device)
    mask = torch.zeros((len(sequences), width), dtype=torch.long, device=device)
    typed = [t for t in types if t is not None]
    type_ids = torch.zeros((len(sequences), width), dtype=typed[0].dtype, device=device) if typed else None
    for row, (seq, own) in enumerate(zip(sequences, types, strict=True)):
        start = width - len(seq)
        ids[row, start:] = seq
        mask[row, start:] = 1
        if type_ids is not None and own is not None:
            type_ids[row, start : start + len(own)] = own
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
    if any(p is not None for p in pixels):
        kwargs["pixel_values"] = torch.cat([p for p in pixels if p is not None])
        kwargs["image_grid_thw"] = torch.cat([g for g in grids if g is not None])
    if type_ids is not None:
        kwargs["mm_token_type_ids"] = type_ids
    return kwargs
