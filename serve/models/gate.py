"""The evaluation gate: a candidate is promoted only if it is not worse than the promoted version.

The retraining job measured both on the same pinned evaluation (SOP on the held-out split, and
success on simulated-phone tasks) and stored the two score sets with the candidate. The gate
compares each measured metric: the candidate passes when none falls below the promoted version's
by more than its tolerance, and when at least one metric was measured at all. The decision, both
score sets and the reasons are recorded on the candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import comb
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.registry import ModelVersion


class GateSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    # Largest allowed drop, in absolute terms (scores are 0-1).
    sop_score_tolerance: float = Field(0.02, ge=0, le=1, description="Largest allowed drop of the SOP score")
    sop_tsr_tolerance: float = Field(
        0.05, ge=0, le=1, description="Largest allowed drop of the SOP task success"
    )
    online_tolerance: float = Field(0.0, ge=0, le=1, description="Largest allowed drop of online success")
    require_improvement: bool = Field(False, description="Also demand a strict gain on at least one metric")


METRICS = (
    ("sop", "score", "sop_score_tolerance"),
    ("sop", "tsr", "sop_tsr_tolerance"),
    ("online", "success_rate", "online_tolerance"),
)


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reasons: list[str]
    candidate: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    baseline_version: str | None = None

    def record(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": self.reasons,
            "candidate": self.candidate,
            "baseline": self.baseline,
            "baseline_version": self.baseline_version,
        }


def decide(candidate: ModelVersion, settings: GateSettings | None = None) -> GateDecision:
    s = settings or GateSettings()
    evaluation = candidate.info.get("evaluation")
    if not evaluation:
        return GateDecision(False, ["the candidate carries no evaluation: nothing to compare"])
    mine = evaluation.get("candidate") or {}
    theirs = (evaluation.get("baseline") or {}).get("scores") or {}
    reasons: list[str] = []
    compared = 0
    improved = False
    passed = True
    for group, metric, tolerance_name in METRICS:
        a = (mine.get(group) or {}).get(metric)
        b = (theirs.get(group) or {}).get(metric)
        if a is None or b is None:
            continue
        compared += 1
        tolerance = getattr(s, tolerance_name)
        label = f"{group}.{metric}"
        if a < b - tolerance - 1e-12:
            passed = False
            reasons.append(f"{label} fell from {b:.4f} to {a:.4f} (tolerance {tolerance})")
        else:
            reasons.append(f"{label} {b:.4f} -> {a:.4f}: within tolerance {tolerance}")
            improved = improved or a > b
    if not compared:
        passed = False
        reasons.append("no metric was measured on both versions")
    elif s.require_improvement and not improved:
        passed = False
        reasons.append("no metric improved, and the gate requires an improvement")
    baseline_version = (evaluation.get("baseline") or {}).get("version")
    return GateDecision(passed, reasons, mine, theirs, baseline_version)


def lucky_pass(episodes: int, discordant: float, deficit: float) -> float:
    """The chance that a candidate worse than the promoted version passes the online comparison
    (tolerance 0) by luck, on ``episodes`` instances that both run.

    On each instance the two versions either agree, or only one of them succeeds: ``discordant`` is
    how often they disagree, ``deficit`` how much lower the candidate's true success is (so the
    candidate alone succeeds with probability (discordant - deficit) / 2 and the promoted version
    alone with (discordant + deficit) / 2). The candidate passes when it alone succeeds at least as
    often. Sizing the evaluation with this is how the deployment guide chooses its episode count.
    """
    if not 0 <= deficit <= discordant <= 1:
        raise ValueError("need 0 <= deficit <= discordant <= 1")
    mine, theirs, same = (discordant - deficit) / 2, (discordant + deficit) / 2, 1 - discordant
    total = 0.0
    for i in range(episodes + 1):
        for j in range(min(i, episodes - i) + 1):  # the candidate alone i times, the other j <= i
            total += (
                comb(episodes, i) * comb(episodes - i, j) * mine**i * theirs**j * same ** (episodes - i - j)
            )
    return total
