"""The PPO loss on tokens whose ratios and advantages are chosen by hand."""

from __future__ import annotations

import math

import pytest
import torch

from train.loss import LossSettings, k3_kl, policy_loss


def tensor(values: list[float]) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float64)


def test_clip_and_dual_clip_per_token() -> None:
    # Ratios 1.5, 0.5, 1.1, 5.0 (log-ratio ln r), advantages +1, +1, -1, -1.
    ratios = [1.5, 0.5, 1.1, 5.0]
    old = tensor([0.0, 0.0, 0.0, 0.0])
    logp = tensor([math.log(r) for r in ratios]).requires_grad_(True)
    adv = tensor([1.0, 1.0, -1.0, -1.0])
    parts = policy_loss(logp, old, adv, torch.ones_like(adv), total_tokens=4)
    # Token 1: A>0, ρ=1.5 -> max(-1.5, -1.2) = -1.2 (clipped: no gradient).
    # Token 2: A>0, ρ=0.5 -> max(-0.5, -0.8) = -0.5.
    # Token 3: A<0, ρ=1.1 -> max(1.1, 1.1) = 1.1; dual cap min(1.1, 3) = 1.1.
    # Token 4: A<0, ρ=5.0 -> max(5.0, 1.2) = 5.0; dual cap min(5.0, 3.0) = 3.0 (no gradient).
    assert parts.pg_loss == pytest.approx((-1.2 - 0.5 + 1.1 + 3.0) / 4)
    assert parts.clip_fraction == pytest.approx(0.75)  # 1.5, 0.5 and 5.0 lie outside [0.8, 1.2]
    parts.loss.backward()
    grad = logp.grad[0].tolist()  # type: ignore[union-attr]
    assert grad[0] == 0.0
    assert grad[1] == pytest.approx(-0.5 / 4)  # d(-A·ρ)/dlogp = -A·ρ
    assert grad[2] == pytest.approx(1.1 / 4)
    assert grad[3] == 0.0


def test_masked_tokens_count_for_nothing_and_the_mean_is_over_the_given_total() -> None:
    logp = tensor([0.0, 0.0, 0.0])
    adv = tensor([1.0, 1.0, 100.0])
    mask = tensor([1.0, 1.0, 0.0])
    assert policy_loss(logp, logp, adv, mask, total_tokens=2).pg_loss == pytest.approx(-1.0)
    assert policy_loss(logp, logp, adv, mask, total_tokens=4).pg_loss == pytest.approx(-0.5)


def test_k3_kl_is_zero_at_the_reference_positive_elsewhere_and_clamped() -> None:
    same = k3_kl(tensor([-1.0]), tensor([-1.0]))
    assert float(same) == 0.0
    # ref - logp = 0.5: e^0.5 - 0.5 - 1 = 0.148721.
    assert float(k3_kl(tensor([-1.5]), tensor([-1.0]))) == pytest.approx(0.148721, abs=1e-6)
    assert float(k3_kl(tensor([-30.0]), tensor([0.0]))) == 10.0


def test_the_kl_term_enters_the_loss_with_its_coefficient() -> None:
    logp, ref = tensor([-1.5]), tensor([-1.0])
    zero_adv = tensor([0.0])
    parts = policy_loss(
        logp,
        logp,
        zero_adv,
        torch.ones_like(logp),
        total_tokens=1,
        ref_logp=ref,
        settings=LossSettings(kl_beta=0.1),
    )
    assert parts.kl == pytest.approx(0.148721, abs=1e-6)
    assert float(parts.loss) == pytest.approx(0.0148721, abs=1e-7)


def test_a_token_made_less_likely_with_a_negative_advantage_stops_at_the_lower_clip() -> None:
    # A<0: the loss wants ρ lower; below 1 - clip_low (0.8) it gains nothing more and has no gradient.
    ratios = [0.5, 0.75, 0.9]
    old = tensor([0.0, 0.0, 0.0])
    logp = tensor([math.log(r) for r in ratios]).requires_grad_(True)
    adv = tensor([-1.0, -1.0, -1.0])
    parts = policy_loss(logp, old, adv, torch.ones_like(adv), total_tokens=3)
    # max(-A·ρ, -A·clip(ρ, 0.8, 1.2)): 0.5 -> 0.8, 0.75 -> 0.8, 0.9 -> 0.9.
    assert parts.pg_loss == pytest.approx((0.8 + 0.8 + 0.9) / 3)
    assert parts.clip_fraction == pytest.approx(2 / 3)
    parts.loss.backward()
    grad = logp.grad[0].tolist()  # type: ignore[union-attr]
    assert grad[0] == 0.0
    assert grad[1] == 0.0
    assert grad[2] == pytest.approx(0.9 / 3)
