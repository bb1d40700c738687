"""Step rewards (METHOD.md §4): format, type and full match, in the paper's or the code's form.

Paper (default): r = 0.1·f + 0.4·f·y + 0.5·f·y·m, so r ∈ {0, 0.1, 0.5, 1}: type and accuracy count
only when the format is right. Released code: r = 0.1·f + 0.9·a with a = 0 for an unparseable
action, 0.1 for a wrong type, 0.5 for the right type and 1 for a match, ungated by the format.
f (format) = a non-empty think block and a parseable action; y = type match; m = full match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent.geometry import Size
from agent.parsing import ParsedResponse
from train.matching import Expected, Match, MatchSettings, match

RewardForm = Literal["paper", "code"]


@dataclass(frozen=True)
class StepReward:
    reward: float
    format_ok: bool
    type_match: bool
    full_match: bool


def score(
    parsed: ParsedResponse,
    resized: Size,
    expected: Expected,
    *,
    form: RewardForm = "paper",
    settings: MatchSettings | None = None,
) -> StepReward:
    """The reward of one sampled response against the expert step."""
    has_think = bool((parsed.think or "").strip())
    outcome = match(parsed.action, resized, expected, settings) if parsed.action is not None else Match.none()
    f = has_think and parsed.action is not None
    y, m = outcome.type_match, outcome.full_match
    if form == "paper":
        reward = 0.1 * f + 0.4 * (f and y) + 0.5 * (f and y and m)
    else:
        action_score = 0.0 if parsed.action is None else 1.0 if m else 0.5 if y else 0.1
        reward = 0.1 * has_think + 0.9 * action_score
    return StepReward(round(reward, 6), f, y, m)
