"""Returns and advantages on small hand-worked groups (METHOD.md §5), γ = 0.5.

The group used throughout (reward, matched):
  A: (1, yes) (1, yes) (0.5, no)   ended at its mismatch
  B: (1, yes) (0.1, no)
  C: (0.5, no)
  D: (0.5, no) (1, yes) (1, yes)   patched at step 0, then matched to the end
"""

from __future__ import annotations

import math
import statistics

import pytest

from train.advantages import (
    AdvantageSettings,
    StepSample,
    discounted_returns,
    episode_advantages,
    group_advantages,
    group_spread,
    keeps_signal,
    step_advantages,
)

S = StepSample
A = [S(1, True), S(1, True), S(0.5, False)]
B = [S(1, True), S(0.1, False)]
C = [S(0.5, False)]
D = [S(0.5, False), S(1, True), S(1, True)]


@pytest.mark.parametrize(
    ("horizon", "want"),
    [
        # Paper: the first mismatching step is in the segment. A0 = 1 + .5·1 + .25·.5 = 1.625.
        # D0 is its own mismatch, so 0.5; D1 runs to the end: 1 + .5·1 = 1.5.
        ("first_mismatch", [[1.625, 1.25, 0.5], [1.05, 0.1], [0.5], [0.5, 1.5, 1.0]]),
        # Released code: the mismatch is left out. A0 = 1 + .5·1 = 1.5, A1 = 1, B0 = 1.
        ("before_mismatch", [[1.5, 1.0, 0.5], [1.0, 0.1], [0.5], [0.5, 1.5, 1.0]]),
        # t_end = T: D0 = .5 + .5·1 + .25·1 = 1.25.
        ("full", [[1.625, 1.25, 0.5], [1.05, 0.1], [0.5], [1.25, 1.5, 1.0]]),
    ],
)
def test_discounted_returns_stop_where_the_horizon_switch_says(horizon: str, want: list[list[float]]) -> None:
    got = [discounted_returns(r, 0.5, horizon) for r in (A, B, C, D)]
    assert got == [pytest.approx(w) for w in want]


def test_gamma_zero_leaves_each_step_its_own_reward() -> None:
    assert discounted_returns(A, 0.0) == [1.0, 1.0, 0.5]


def test_step_level_advantages_compare_rollouts_alive_at_the_same_step() -> None:
    returns = [[1.625, 1.25, 0.5], [1.05, 0.1], [0.5]]
    got = step_advantages(returns)
    # t=0: mean 1.058333, unbiased std 0.562546 -> (1.625 - 1.058333)/0.562546 = 1.007323.
    assert got[0][0] == pytest.approx(1.007323, abs=1e-5)
    assert got[1][0] == pytest.approx(-0.014814, abs=1e-5)
    assert got[2][0] == pytest.approx(-0.992509, abs=1e-5)
    # t=1: two alive rollouts are always ±1/√2 apart from their mean in unbiased units.
    assert got[0][1] == pytest.approx(0.707106, abs=1e-6)
    assert got[1][1] == pytest.approx(-0.707106, abs=1e-6)
    assert got[0][2] == 0.0  # a lone sample gets 0


def test_episode_level_advantages_in_both_forms() -> None:
    # Totals 2.5, 1.1, 0.5: mean 1.366667, unbiased std 1.026320.
    total = episode_advantages([A, B, C], AdvantageSettings())
    assert total[0] == [pytest.approx(1.104268, abs=1e-6)] * 3
    assert total[1] == [pytest.approx(-0.259828, abs=1e-6)] * 2
    assert total[2] == [pytest.approx(-0.844440, abs=1e-6)]
    # Pooled: the six step rewards, mean 0.683333, unbiased std 0.376386.
    pooled = episode_advantages([A, B, C], AdvantageSettings(episode="pooled_step"))
    assert pooled[0] == [pytest.approx(0.841331, abs=1e-6)] * 2 + [pytest.approx(-0.487087, abs=1e-6)]
    assert pooled[1][1] == pytest.approx(-1.549822, abs=1e-5)  # (0.1 - 0.683333)/0.376386
    # The released code's singleton rule: mean 0, std 1.
    assert episode_advantages([C], AdvantageSettings(episode="pooled_step")) == [[pytest.approx(0.5)]]
    assert episode_advantages([C], AdvantageSettings()) == [[0.0]]


def test_combined_advantage_adds_omega_times_the_step_term() -> None:
    got = group_advantages([A, B, C])
    assert got[0] == [
        pytest.approx(1.104268 + 1.007323, abs=1e-5),
        pytest.approx(1.104268 + 0.707106, abs=1e-5),
        pytest.approx(1.104268, abs=1e-5),
    ]
    assert got[2] == [pytest.approx(-0.844440 - 0.992509, abs=1e-5)]
    half = group_advantages([A, B, C], AdvantageSettings(omega=0.5))
    assert half[0][1] == pytest.approx(1.104268 + 0.5 * 0.707106, abs=1e-5)
    code = group_advantages([A, B, C], AdvantageSettings(episode="pooled_step", horizon="before_mismatch"))
    # Step term at t=0 from R_0 = 1.5, 1.0, 0.5: exactly +1, 0, -1.
    assert code[0][0] == pytest.approx(0.841331 + 1.0, abs=1e-5)
    assert code[1][0] == pytest.approx(0.841331, abs=1e-5)


def test_dynamic_sampling_drops_groups_whose_starting_returns_barely_differ() -> None:
    assert keeps_signal([A, B, C])  # R_0 1.625, 1.05, 0.5: population std 0.4593 > 0.3
    assert not keeps_signal([[S(1, True)], [S(1, True)]])  # all equal
    assert not keeps_signal([[S(1, True)], [S(0.5, False)]])  # std 0.25
    assert keeps_signal([[S(1, True)], [S(0.1, False)]])  # std 0.45
    assert keeps_signal([A])  # a lone rollout is kept
    assert not keeps_signal([A, B, C], eta=0.5)


def test_dynamic_sampling_drops_a_group_whose_spread_is_exactly_eta() -> None:
    # METHOD.md §5: drop when the R_0 std is <= η = 0.3. R_0 of 0.0 and 0.6 is the boundary itself:
    # their population std is 0.3 exactly in floating point (0.1 and 0.7 would be too; 0.2 and 0.8 not).
    assert statistics.pstdev([0.0, 0.6]) == 0.3
    assert not keeps_signal([[S(0.0, False)], [S(0.6, True)]])
    # One float further apart (std 0.30000000000000004) is kept.
    above = math.nextafter(0.6, 1.0)
    assert statistics.pstdev([0.0, above]) > 0.3
    assert keeps_signal([[S(0.0, False)], [S(above, True)]])


def test_any_step_signal_keeps_groups_that_differ_only_after_their_first_mismatch() -> None:
    """Two rollouts patched at the same step 0 that differ only after the patch: R_0 is 0.1 for both
    (the return stops at the mismatch), so the paper's R_0 rule drops them even at η = 0, though
    their step-1 returns are 1.5 and 0.1 (step advantages ±0.707) and their summed rewards 2.1 and
    0.2. ``any_step`` keeps them."""
    hit = [S(0.1, False), S(1, True), S(1, True)]
    miss = [S(0.1, False), S(0.1, False)]
    assert group_spread([hit, miss]) == 0.0
    assert not keeps_signal([hit, miss], eta=0.0)
    assert group_spread([hit, miss], signal="any_step") == pytest.approx(0.95)  # the sums' spread
    # Rollouts that part at step 2: R_0 1.75 vs 1.525, population std 0.1125 <= 0.3 (dropped by R_0);
    # their step-2 returns 1 and 0.1 spread 0.45, their summed rewards 3 and 2.1 spread 0.45.
    late_hit = [S(1, True), S(1, True), S(1, True)]
    late_miss = [S(1, True), S(1, True), S(0.1, False)]
    assert group_spread([late_hit, late_miss]) == pytest.approx(0.1125)
    assert group_spread([late_hit, late_miss], signal="any_step") == pytest.approx(0.45)
    # Rollouts that did exactly alike have no signal under either rule.
    assert group_spread([hit, list(hit)], signal="any_step") == 0.0


def test_without_the_episode_term_and_with_gamma_zero_each_step_is_plain_grpo() -> None:
    settings = AdvantageSettings(gamma=0.0, episode="none")
    assert episode_advantages([A, B, C], settings) == [[0.0] * 3, [0.0] * 2, [0.0]]
    got = group_advantages([A, B, C], settings)
    # Step 0 rewards 1.0, 1.0, 0.5 (mean 0.833333, unbiased std 0.288675): z-scores of the rewards alone.
    assert got[0][0] == pytest.approx(0.57735, abs=1e-5)
    assert got[2][0] == pytest.approx(-1.154701, abs=1e-5)
