"""The policy loss (METHOD.md §6): token-mean PPO clip with dual clip, and the k3 KL to a reference.

For each response token: ρ = exp(clamp(logp − logp_old, ±20)); the clipped surrogate
max(−Aρ, −A·clip(ρ, 1−ε_low, 1+ε_high)), capped at −A·c for A < 0 (dual clip, c = 3); plus
β·k3 with k3 = exp(ref − logp) − (ref − logp) − 1 clamped to [−10, 10]. No entropy term.

Token-mean is over every response token of the optimiser mini-batch: callers pass the mini-batch's
token count, so micro-batches accumulate to exactly that mean. ``aggregation: sample_mean`` instead
weighs every sample alike (each one's token-mean, averaged over the mini-batch's samples), so a long
sample (a junk response run to the token limit) counts as much as a short one, not more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LOG_RATIO_CLAMP = 20.0
KL_CLAMP = 10.0


@dataclass(frozen=True)
class LossSettings:
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 3.0
    kl_beta: float = 1e-4
    # "token_mean" (the paper): every response token of the mini-batch counts alike; "sample_mean":
    # every sample counts alike (the learner divides each one's sum by its length x the samples).
    aggregation: Literal["token_mean", "sample_mean"] = "token_mean"


@dataclass
class LossParts:
    loss: torch.Tensor  # what to backpropagate (already divided by the mini-batch's token count)
    pg_loss: float
    kl: float
    clip_fraction: float
    ratio_mean: float
    tokens: int


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """The low-variance KL estimate per token, clamped as the released code does."""
    log_ratio = ref_logp - logp
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-KL_CLAMP, KL_CLAMP)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: int,
    ref_logp: torch.Tensor | None = None,
    settings: LossSettings | None = None,
) -> LossParts:
    """All tensors are [batch, length] over response positions; ``mask`` marks real response tokens."""
    s = settings or LossSettings()
    mask = mask.to(logp.dtype)
    ratio = torch.exp(torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    surrogate = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - s.clip_low, 1 + s.clip_high))
    dual = torch.minimum(surrogate, -advantages * s.dual_clip)
    per_token = torch.where(advantages < 0, dual, surrogate)
    denominator = max(total_tokens, 1)
    pg = (per_token * mask).sum() / denominator
    loss = pg
    kl_value = 0.0
    if ref_logp is not None and s.kl_beta:
        kl = (k3_kl(logp, ref_logp) * mask).sum() / denominator
        loss = loss + s.kl_beta * kl
        kl_value = float(kl.detach())
    with torch.no_grad():
        clipped = ((ratio < 1 - s.clip_low) | (ratio > 1 + s.clip_high)).to(logp.dtype)
        count = mask.sum().clamp(min=1)
        clip_fraction = float((clipped * mask).sum() / count)
        ratio_mean = float((ratio * mask).sum() / count)
    return LossParts(loss, float(pg.detach()), kl_value, clip_fraction, ratio_mean, int(mask.sum()))


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, *, total_tokens: int) -> torch.Tensor:
    """Cross-entropy of the expert response tokens, token-mean over the mini-batch."""
    return -(logp * mask.to(logp.dtype)).sum() / max(total_tokens, 1)
