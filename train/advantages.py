"""Returns and advantages of a task group (METHOD.md §5), with dynamic sampling.

A group is the N rollouts of one expert trajectory. Each rollout is the list of its step samples
(reward, whether the sample matched the expert), in step order; a rollout that ended early is
shorter. Every function here is pure and works on plain floats: the learner broadcasts a step's
advantage over the tokens of that step's response.

Defaults are the paper's (γ = 0.5, ω = 1, the first mismatching step included in the return,
episode-level statistics over the rollouts' total rewards); the switches give the released
code's forms.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

GAMMA = 0.5
OMEGA = 1.0
ETA = 0.3
EPS = 1e-6


@dataclass(frozen=True)
class StepSample:
    reward: float
    matched: bool


Rollout = Sequence[StepSample]


@dataclass(frozen=True)
class AdvantageSettings:
    gamma: float = GAMMA
    omega: float = OMEGA  # weight of the step-level term
    # Where a return stops: "first_mismatch" (paper: the first mismatching step at or after t is
    # included), "before_mismatch" (released code: it is left out; a mismatched step's return is
    # its own reward), "full" (to the rollout's last step).
    horizon: Literal["first_mismatch", "before_mismatch", "full"] = "first_mismatch"
    # "total" (Ours, the paper's reading): a rollout's summed reward against the group's;
    # "pooled_step" (released code): each step reward against all step rewards of the group;
    # "none": no episode-level term (offline RL with the expert's history, where one rollout's
    # steps do not depend on each other: use it with gamma 0 for per-step GRPO).
    episode: Literal["total", "pooled_step", "none"] = "total"
    eps: float = EPS


def discounted_returns(
    rollout: Rollout, gamma: float = GAMMA, horizon: str = "first_mismatch"
) -> list[float]:
    """R_t = Σ_{k=t}^{t_end} γ^(k−t) r_k for every step t of one rollout."""
    returns = [0.0] * len(rollout)
    running = 0.0
    for t in range(len(rollout) - 1, -1, -1):
        step = rollout[t]
        if horizon == "full":
            running = step.reward + gamma * running
        elif horizon == "first_mismatch":
            # A mismatch closes the segment: later steps do not flow back past it.
            running = step.reward if not step.matched else step.reward + gamma * running
        elif horizon == "before_mismatch":
            following = running if t + 1 < len(rollout) and rollout[t + 1].matched else 0.0
            running = step.reward + gamma * following if step.matched else step.reward
        else:
            raise ValueError(f"unknown horizon {horizon!r}")
        returns[t] = running
    return returns


def _zscores(values: Sequence[float], eps: float) -> list[float]:
    """(v − mean) / (std + eps) with the unbiased std; a lone value scores 0."""
    if len(values) < 2:
        return [0.0] * len(values)
    mean = statistics.fmean(values)
    std = statistics.stdev(values)
    return [(v - mean) / (std + eps) for v in values]


def step_advantages(returns: Sequence[Sequence[float]], eps: float = EPS) -> list[list[float]]:
    """A^S: each R^i_t against the R_t of the group's rollouts still alive at step t."""
    out = [[0.0] * len(r) for r in returns]
    for t in range(max((len(r) for r in returns), default=0)):
        alive = [i for i, r in enumerate(returns) if len(r) > t]
        for i, z in zip(alive, _zscores([returns[i][t] for i in alive], eps), strict=True):
            out[i][t] = z
    return out


def episode_advantages(group: Sequence[Rollout], settings: AdvantageSettings) -> list[list[float]]:
    """A^E, per step (broadcast over a rollout's steps in the ``total`` form)."""
    if settings.episode == "none":
        return [[0.0] * len(rollout) for rollout in group]
    if settings.episode == "total":
        totals = [sum(s.reward for s in rollout) for rollout in group]
        scores = _zscores(totals, settings.eps)
        return [[scores[i]] * len(rollout) for i, rollout in enumerate(group)]
    pooled = [s.reward for rollout in group for s in rollout]
    if len(pooled) < 2:  # the released code's singleton rule: mean 0, std 1
        mean, std = 0.0, 1.0
    else:
        mean, std = statistics.fmean(pooled), statistics.stdev(pooled)
    return [[(s.reward - mean) / (std + settings.eps) for s in rollout] for rollout in group]


def group_advantages(
    group: Sequence[Rollout], settings: AdvantageSettings | None = None
) -> list[list[float]]:
    """A_{i,t} = A^E + ω·A^S for every step sample of the group."""
    settings = settings or AdvantageSettings()
    returns = [discounted_returns(r, settings.gamma, settings.horizon) for r in group]
    a_step = step_advantages(returns, settings.eps)
    a_episode = episode_advantages(group, settings)
    return [
        [e + settings.omega * s for e, s in zip(a_episode[i], a_step[i], strict=True)]
        for i in range(len(group))
    ]


def keeps_signal(
    group: Sequence[Rollout], eta: float = ETA, settings: AdvantageSettings | None = None
) -> bool:
    """Dynamic sampling: keep a group whose rollouts' R_0 spread (population std) exceeds η.

    A group whose rollouts all did equally well or badly teaches nothing; one with a single
    rollout is kept, as in the released code.
    """
    return spread_keeps(group_spread(group, settings), eta)


def spread_keeps(spread: float | None, eta: float) -> bool:
    """The dynamic-sampling rule on a group's R_0 spread (``group_spread``): kept above η."""
    return spread is None or (math.isfinite(spread) and spread > eta)


def group_spread(
    group: Sequence[Rollout], settings: AdvantageSettings | None = None, signal: str = "r0"
) -> float | None:
    """What dynamic sampling compares with η (None: fewer than two non-empty rollouts).

    ``r0`` (the paper): the population std of the rollouts' R_0. ``any_step``: the largest
    population std of R_t over the rollouts alive at any step t, or of their summed rewards. R_0
    hides what the patch module adds: with γ = 0.5 and the return cut at the first mismatch, rollouts
    that differ only at step 2 or later spread R_0 by at most ~0.22, and rollouts that share their
    first mismatch and differ only after the patch not at all, though their step advantages are ±1.
    """
    settings = settings or AdvantageSettings()
    rollouts = [r for r in group if r]
    if len(rollouts) < 2:
        return None
    returns = [discounted_returns(r, settings.gamma, settings.horizon) for r in rollouts]
    if signal == "r0":
        return statistics.pstdev(r[0] for r in returns)
    if signal != "any_step":
        raise ValueError(f"unknown dynamic-sampling signal {signal!r}")
    spreads = [statistics.pstdev(sum(s.reward for s in r) for r in rollouts)]
    for t in range(max(len(r) for r in returns)):
        alive = [r[t] for r in returns if len(r) > t]
        if len(alive) >= 2:
            spreads.append(statistics.pstdev(alive))
    return max(spreads)
