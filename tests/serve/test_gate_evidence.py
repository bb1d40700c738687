"""The gate decides on enough evidence: the chance a worse candidate passes by luck, and the
episode counts the deployment and the demo evaluate on."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.models.gate import lucky_pass

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_chance_of_a_lucky_pass_is_the_trinomial_sum() -> None:
    # One episode: the candidate alone succeeds (0.05) or both agree (0.7).
    assert lucky_pass(1, 0.3, 0.2) == pytest.approx(0.75)
    # Two: i >= j over (candidate alone, promoted alone, same) = (0.05, 0.25, 0.7).
    a, b, c = 0.05, 0.25, 0.7
    assert lucky_pass(2, 0.3, 0.2) == pytest.approx(c * c + 2 * a * c + a * a + 2 * a * b)
    # An equal candidate passes at least half the time; a worse one less, the more episodes.
    assert lucky_pass(20, 0.3, 0.0) > 0.5
    chances = [lucky_pass(n, 0.3, 0.2) for n in (5, 10, 20, 40)]
    assert chances == sorted(chances, reverse=True)
    assert chances[0] > 0.3
    assert chances[-1] < 0.02
    with pytest.raises(ValueError, match="deficit"):
        lucky_pass(5, 0.1, 0.2)


def test_the_deployed_gate_and_the_demos_run_enough_episodes_that_luck_rarely_passes_a_worse_candidate() -> (
    None
):
    """40 episodes in deploy/retrain.yaml (a candidate 20 points worse passes ~1%), 20 in the demo
    (~6%), all from the held-out side of each task's split."""
    pytest.importorskip("torch")
    from serve.demo.loop.setting import LoopSetting, retrain_config
    from train.config import load_retrain_config
    from train.online import OnlineSettings, cases

    deployed = load_retrain_config(DEPLOY / "retrain.yaml").evaluation.online
    assert deployed is not None
    assert deployed.held_out is not None
    assert lucky_pass(len(cases(deployed)), 0.3, 0.2) < 0.02
    setting = LoopSetting()
    demo = OnlineSettings.model_validate(
        retrain_config(setting, Path("data"), "sqlite://", Path("s"))["evaluation"]["online"]
    )
    assert demo.held_out is not None
    assert lucky_pass(len(cases(demo)), 0.3, 0.2) < 0.07
