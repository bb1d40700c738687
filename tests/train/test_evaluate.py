"""SOP (METHOD.md §7) on hand-made trajectories, with an engine that matches or misses on chosen steps."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest
from PIL import Image

from agent.actions import Wait, action_from_dict
from agent.geometry import ResizeSettings, Size
from agent.parsing import format_response
from agent.prompt import PromptSettings, TextPart, Turn
from agent.trajectory import ActionLabel
from train.data import ExpertStep, ExpertTrajectory
from train.evaluate import sop
from train.model import Sampling
from train.rollout import Generated, RolloutEngine

SCREEN = Size(540, 1200)
PROMPT = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))
# Actions without coordinates: a right answer is the expert's action as written, whatever the resize.
LABELS = [
    ActionLabel(action="open", text="Clock"),
    ActionLabel(action="type", text="07:30"),
    ActionLabel(action="system_button", button="Enter"),
    ActionLabel(action="terminate", status="success"),
]
WRONG = format_response(Wait(time=1), "I am not sure")


def png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", SCREEN, (shade, shade, shade)).save(buffer, "PNG")
    return buffer.getvalue()


def trajectory(goal: str, length: int) -> ExpertTrajectory:
    steps = tuple(ExpertStep(LABELS[k], SCREEN, png=png(30 * k), sha256=f"{goal}-{k}") for k in range(length))
    return ExpertTrajectory(goal, steps, "hand-made")


class PlannedEngine(RolloutEngine):
    """Answers step t of a trajectory (t = assistant turns so far) rightly or wrongly, as planned."""

    def __init__(self, plans: dict[str, tuple[ExpertTrajectory, list[bool]]]) -> None:
        self.plans = plans
        self.asked: list[tuple[str, int]] = []  # (goal, step) of every request
        self.samplings: list[Sampling] = []

    def generate(self, turns: Sequence[Turn], n: int, sampling: Sampling) -> list[Generated]:
        text = " ".join(p.text for turn in turns for p in turn.parts if isinstance(p, TextPart))
        (goal,) = [g for g in self.plans if g in text]
        expert, right = self.plans[goal]
        t = sum(1 for turn in turns if turn.role == "assistant")
        self.asked.append((goal, t))
        self.samplings.append(sampling)
        answer = format_response(action_from_dict(expert.steps[t].expert.to_dict()), "my step")
        return [Generated(answer if right[t] else WRONG)] * n


def test_sop_progress_and_success_on_hand_made_trajectories() -> None:
    whole = trajectory("Set an alarm", 3)  # s = 3 of 3
    last_missed = trajectory("Start a timer", 3)  # s = 2 of 3
    first_missed = trajectory("Open the stopwatch", 2)  # s = 0 of 2
    short_whole = trajectory("Check the world clock", 2)  # s = 2 of 2
    engine = PlannedEngine(
        {
            whole.goal: (whole, [True, True, True]),
            last_missed.goal: (last_missed, [True, True, False]),
            first_missed.goal: (first_missed, [False, True]),
            short_whole.goal: (short_whole, [True, True]),
        }
    )
    result = sop(engine, [whole, last_missed, first_missed, short_whole], prompt=PROMPT)
    assert [(r["matched"], r["steps"]) for r in result["per_trajectory"]] == [(3, 3), (2, 3), (0, 2), (2, 2)]
    # PG is the mean of the ratios (1 + 2/3 + 0 + 1) / 4, not matched / expert steps pooled (7/10).
    assert result["pg"] == pytest.approx(2 / 3)
    # TSR counts only whole trajectories: one short of the end is a failure, as is missing the first.
    assert result["tsr"] == pytest.approx(0.5)
    assert result["score"] == pytest.approx((2 / 3 + 0.5) / 2)
    assert result["trajectories"] == 4
    # Greedy, no patching: a replay is never asked past its first mismatch.
    assert [t for goal, t in engine.asked if goal == first_missed.goal] == [0]
    assert [t for goal, t in engine.asked if goal == last_missed.goal] == [0, 1, 2]
    assert {s.temperature for s in engine.samplings} == {0.0}


def test_sop_of_nothing_is_zero() -> None:
    result = sop(PlannedEngine({}), [], prompt=PROMPT)
    assert (result["pg"], result["tsr"], result["score"], result["trajectories"]) == (0.0, 0.0, 0.0, 0)
