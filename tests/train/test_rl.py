"""One semi-online RL step on a fixed batch: rollouts -> rewards -> advantages -> items -> PPO update.

The group is scripted so that every number can be worked by hand (METHOD.md §2-6): four rollouts
of a three-step expert trajectory, ε = 1, paper-form rewards (1 match, 0.5 right type, 0.1 wrong
type), γ = 0.5, A = A^E + A^S.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agent.parsing import format_response
from agent.trajectory import ActionLabel
from tests.train.test_rollout import PROMPT, RESIZED, SCREEN, TRAJECTORY, ScriptEngine
from train.config import OptimSettings, RLConfig
from train.labels import expert_action
from train.learner import TorchLearner
from train.loss import LossSettings
from train.model import PolicyModel
from train.rollout import PatchSettings, RolloutSettings, SemiOnlineRollout

pytestmark = pytest.mark.timeout(600)


def said(label: ActionLabel, thought: str) -> str:
    return format_response(expert_action(label, SCREEN, RESIZED), thought)


CLICK, TYPE, DONE = (ActionLabel.model_validate(s.expert.to_dict()) for s in TRAJECTORY.steps)
MATCH = {t: said(label, f"I do step {t}") for t, label in enumerate((CLICK, TYPE, DONE))}
WRONG_TYPE = said(ActionLabel(action="wait", time=1), "I wait")  # reward 0.1
RIGHT_TYPE = said(ActionLabel(action="terminate", status="failure"), "I give up")  # 0.5 at the terminate step

# Rollouts 1..4 (requests at each step go by shared history, in rollout order):
#   R1: wrong type (patched), match, match        rewards 0.1, 1, 1    total 2.1
#   R2: wrong type (patched), wrong type (ends)             0.1, 0.1   total 0.2
#   R3: match, match, right type only (patched)             1, 1, 0.5  total 2.5
#   R4: as R1                                                           total 2.1
PLAN = {
    0: [WRONG_TYPE, WRONG_TYPE, MATCH[0], WRONG_TYPE],
    1: [MATCH[1], WRONG_TYPE, MATCH[1], MATCH[1]],  # R1, R2, R4 share the patched history; then R3
    2: [MATCH[2], MATCH[2], RIGHT_TYPE],
}  # R1 and R4, then R3
# By hand (z-scores with the sample std): totals 2.1, 0.2, 2.5, 2.1 give A^E = +0.36267, -1.47485,
# +0.74951, +0.36267. Returns over the matching segment (γ = 0.5; a mismatch closes it):
# R1 0.1, 1.5, 1; R2 0.1, 0.1; R3 1.625, 1.25, 0.5. A^S over the rollouts alive at each step:
# t=0 (0.1, 0.1, 1.625, 0.1): -0.5, -0.5, +1.5, -0.5; t=1 (1.5, 0.1, 1.25, 1.5): +0.61678,
# -1.47653, +0.24297, +0.61678; t=2 (1, 1, 0.5 for R1, R4, R3): +0.57735, +0.57735, -1.15470.
EXPECTED = [
    [0.36267 - 0.5, 0.36267 + 0.61678, 0.36267 + 0.57735],
    [-1.47485 - 0.5, -1.47485 - 1.47653],
    [0.74951 + 1.5, 0.74951 + 0.24297, 0.74951 - 1.15470],
    [0.36267 - 0.5, 0.36267 + 0.61678, 0.36267 + 0.57735],
]
MATCHED = [[False, True, True], [False, False], [True, True, False], [False, True, True]]


def test_an_rl_step_raises_matched_samples_and_lowers_mismatched_ones(tiny_model_dir: Path) -> None:
    """A sign flip anywhere between rewards and loss, or advantages that ignore where a rollout
    mismatched (its return would run on past the mismatch), fails this test."""
    from train.rl import _items

    engine = ScriptEngine(PLAN)
    settings = RolloutSettings(n=4, patch=PatchSettings(threshold=1))
    rollouts = SemiOnlineRollout(engine, settings, prompt=PROMPT).run(TRAJECTORY)
    assert [[s.matched for s in r.steps] for r in rollouts] == MATCHED
    assert [[s.reward.reward for s in r.steps] for r in rollouts] == [
        [0.1, 1, 1],
        [0.1, 0.1],
        [1, 1, 0.5],
        [0.1, 1, 1],
    ]

    policy = PolicyModel(tiny_model_dir, prompt=PROMPT)
    config = RLConfig.model_validate(
        {
            "model": tiny_model_dir,
            "output_dir": "unused",
            "data": {"sources": [{"kind": "sim"}]},
            "rollout": settings.model_dump(),
        }
    )
    items = _items(config, SimpleNamespace(policy=policy), [(TRAJECTORY, rollouts)])  # type: ignore[arg-type]
    assert [i.advantage for i in items] == pytest.approx([a for row in EXPECTED for a in row], abs=1e-4)
    # Matched samples are pushed up and mismatched ones down: the sign of every advantage.
    signs = [a > 0 for row in EXPECTED for a in row]
    assert signs == [m for row in MATCHED for m in row]

    with torch.no_grad():
        policy.model.eval()
        before = [policy.logprobs(i.sample)[0] for i in items]
    for item, logp in zip(items, before, strict=True):
        item.old_logp = logp
    TorchLearner(policy, OptimSettings(lr=1e-3, weight_decay=0.0)).ppo_update(
        items, LossSettings(kl_beta=0.0)
    )
    with torch.no_grad():
        policy.model.eval()
        after = [policy.logprobs(i.sample)[0] for i in items]
    moved = [float((a - b).mean()) for a, b in zip(after, before, strict=True)]
    for item, change in zip(items, moved, strict=True):
        if abs(item.advantage) > 0.5:  # the strongly pushed samples all move their own way
            assert (change > 0) == (item.advantage > 0), (item.advantage, change)
    matched_moves = [c for c, up in zip(moved, signs, strict=True) if up]
    mismatched_moves = [c for c, up in zip(moved, signs, strict=True) if not up]
    assert sum(matched_moves) / len(matched_moves) > 0 > sum(mismatched_moves) / len(mismatched_moves)


def test_rollout_metrics_count_samples_per_step_and_matches_after_a_first_mistake() -> None:
    """What the patch module changes, as the benchmark reads it: a rollout that stops at its first
    mismatch trains nothing after it; a patched one goes on, and its later matches are counted."""
    from types import SimpleNamespace

    from train.rewards import StepReward
    from train.rl import _rollout_metrics
    from train.rollout import Generated, Rollout, StepRecord

    def record(step: int, matched: bool) -> StepRecord:
        return StepRecord(step, [], Generated(""), StepReward(float(matched), True, matched, matched))

    trajectory = SimpleNamespace(steps=[None] * 4)
    stopped = Rollout(trajectory, [record(0, True), record(1, False)])  # type: ignore[arg-type]
    patched = Rollout(trajectory, [record(0, False), record(1, True), record(2, False), record(3, True)])  # type: ignore[arg-type]
    metrics = _rollout_metrics([(trajectory, [stopped, patched])])  # type: ignore[list-item]
    assert metrics["samples_at_step"] == [2, 2, 1, 1]
    assert metrics["after_mistake"] == [2, 3]  # steps 1-3 of the patched rollout, two of them matched
    assert metrics["match_rate"] == pytest.approx(3 / 6)


@pytest.mark.parametrize(("signal", "kept"), [("r0", 0), ("any_step", 1)])
def test_dynamic_sampling_looks_at_the_signal_the_config_names(signal: str, kept: int) -> None:
    """Two rollouts that both miss step 0 (patched) and part at step 1: R_0 is 0.1 for both, so
    the paper's rule drops the group even at η = 0; ``any_step`` keeps it for the update."""
    from train.rl import _draw
    from train.runs import Stream

    plan = {0: [WRONG_TYPE, WRONG_TYPE], 1: [MATCH[1], WRONG_TYPE], 2: [MATCH[2]]}
    roller = SemiOnlineRollout(
        ScriptEngine(plan), RolloutSettings(n=2, patch=PatchSettings(threshold=1)), prompt=PROMPT
    )
    config = RLConfig.model_validate(
        {
            "model": "unused",
            "output_dir": "unused",
            "data": {"sources": [{"kind": "sim"}]},
            "tasks_per_step": 1,
            "dynamic_sampling": {"eta": 0.0, "max_extra_draws": 0, "signal": signal},
        }
    )
    groups, dropped, _, spreads = _draw(config, roller, Stream([TRAJECTORY], seed=0))
    assert (len(groups), len(dropped)) == (kept, 1 - kept)
    assert spreads[0] == (0.0 if signal == "r0" else pytest.approx(0.95))  # sums 2.1 and 0.2
