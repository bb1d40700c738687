"""Weights fingerprints: what a version's weights answer on a fixed probe, recorded where they are
trained and checked where they are served.

The probe is the swap canary's request (the simulated phone's home screen and a simple goal) with a
fixed answer appended; a fingerprint is the log-probability of each of the answer's last
``TOKENS`` tokens under teacher forcing. The retraining job records it from the weights it trained,
with transformers (``LocalPolicy.score``); a swap asks the engine that loaded the version for the
same numbers (vLLM's ``prompt_logprobs``, or the in-process engine) and compares them before the
``default`` alias moves. Weights that are not the trained ones (a stale adapter under the new
name, a reload that did not take, an adapter vLLM dropped) answer with other numbers.

Engines differ from the trainer in numerics (kernels, dtypes), so the comparison has a tolerance:
the mean absolute difference over the tokens. ``DEFAULT_TOLERANCE`` is set from measurements
(BENCHMARKS.md, "Weights fingerprints"); a deployment whose engine runs in another dtype than its
trainer measures its own with ``uis1 models fingerprint``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.geometry import ResizeSettings, Size
from agent.prompt import PromptSettings, Screenshot, TextPart, Turn, build_conversation

FORMAT = 1
INFO_KEY = "weights_fingerprint"  # where a registry version's info keeps the training job's record
TOKENS = 16  # the answer's last tokens: far from where it joins the prompt, so every tokenizer agrees
GOAL = "Open the Settings app"
# An answer cut off inside its thought: free text, whose tokens no model predicts with certainty
# (the closing tags and action JSON of a whole answer come out at log-probability ~0 from any
# trained version, and would tell none apart).
ANSWER = (
    "<think>\nThe home screen shows the apps in rows and the goal names the Settings app, so the next "
    "step is to find its icon and open it by name"
)
# Mean |difference| in nats per token. What differs between the trainer's numerics and an engine's
# is far below it; what one training step moves is far above it (BENCHMARKS.md).
DEFAULT_TOLERANCE = 0.02
# The probe's screen at a size of its own, whatever the service's resize: the trainer and every
# engine then see the same image tokens (and it is within any engine's own image limits).
RESIZE = ResizeSettings(min_pixels=16 * 28 * 28, max_pixels=64 * 28 * 28)


@functools.cache
def screen() -> Screenshot:
    """The simulated phone's home screen, drawn once per process (drawing it costs ~0.1 s)."""
    from devices.sim.phone import SimPhone

    phone = SimPhone("canary", clock="09:41")
    return Screenshot(phone.screenshot_png(), Size(phone.width, phone.height))


def probe(prompt: PromptSettings) -> list[Turn]:
    """The probe conversation under ``prompt`` (the version's own system prompt; the probe's own
    ``RESIZE``): the canary's request and the fixed answer, whose last ``TOKENS`` log-probabilities
    are compared."""
    # The probe's own size, sent resized whatever the service sends: the engine must see the image
    # tokens the trainer saw.
    fixed = dataclasses.replace(prompt, resize=RESIZE, image_transport="resized", wire_format="PNG")
    turns = build_conversation(GOAL, [screen()], [], fixed)
    return [*turns, Turn("assistant", (TextPart(ANSWER),))]


def probe_key(prompt: PromptSettings) -> str:
    """What the probe was: a fingerprint is only compared with one of the same probe."""
    spec = {
        "format": FORMAT,
        "tokens": TOKENS,
        "goal": GOAL,
        "answer": ANSWER,
        "system": prompt.system_prompt,
        "resize": [RESIZE.min_pixels, RESIZE.max_pixels],
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fingerprint:
    logprobs: tuple[float, ...]
    probe: str  # probe_key of the probe it answered
    by: str  # what computed it: "transformers" (the trainer's numerics), "vllm", "local"

    def record(self) -> dict[str, Any]:
        return {"logprobs": [round(v, 6) for v in self.logprobs], "probe": self.probe, "by": self.by}

    @classmethod
    def of(cls, record: Any) -> Fingerprint | None:
        """The fingerprint a registry record holds; None for none (or one this code cannot read)."""
        if not isinstance(record, dict):
            return None
        try:
            values = tuple(float(v) for v in record["logprobs"])
            return cls(values, str(record["probe"]), str(record.get("by", "?")))
        except (KeyError, TypeError, ValueError):
            return None


def distance(a: Fingerprint, b: Fingerprint) -> float:
    """Mean absolute difference per token (inf for fingerprints of different probes)."""
    if a.probe != b.probe or len(a.logprobs) != len(b.logprobs) or not a.logprobs:
        return float("inf")
    return statistics.fmean(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))


@dataclass(frozen=True)
class Verdict:
    ok: bool
    why: str  # one line: what was verified, or what does not match
    detail: dict[str, Any]


def verify(
    served: Fingerprint,
    recorded: Fingerprint | None,
    previous: Fingerprint | None,
    *,
    name: str,
    previous_name: str | None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Verdict:
    """Whether the engine serves the weights that were trained as ``name``: its answer to the probe
    must match the training job's record, and must not be the previous version's (when the two
    records differ by more than ``tolerance``, so that the previous weights can be told apart)."""
    detail: dict[str, Any] = {"served": served.record(), "tolerance": tolerance}
    if recorded is None:
        return Verdict(
            True, f"{name} has no recorded fingerprint: served unverified", detail | {"verified": False}
        )
    if served.probe != recorded.probe or len(served.logprobs) != len(recorded.logprobs):
        # (no distance is stored: it is infinite, which JSON columns refuse)
        return Verdict(
            True,
            f"{name}'s fingerprint was recorded on another probe: served unverified",
            detail | {"verified": False},
        )
    to_record = distance(served, recorded)
    detail["distance"] = round(to_record, 6)
    comparable = previous is not None and distance(previous, recorded) != float("inf")
    if previous is not None and comparable:
        apart = distance(recorded, previous)
        to_previous = distance(served, previous)
        detail |= {
            "previous": previous_name,
            "records_apart": round(apart, 6),
            "to_previous": round(to_previous, 6),
        }
        # The previous version's answer, and nearer to it than to the trained record: the new
        # weights did not load (an engine's numerics can put good weights near both).
        if apart > tolerance and to_previous <= tolerance and to_previous < to_record:
            return Verdict(
                False,
                f"the engine answers as the previous version {previous_name} (probe distance {to_previous:.4f}), "
                f"not as {name}'s trained weights ({to_record:.4f}): the new weights did not load",
                detail | {"verified": False},
            )
    if to_record > tolerance:
        return Verdict(
            False,
            f"the weights served as {name} are not the trained ones: probe distance {to_record:.4f} "
            f"to the training job's record, tolerance {tolerance:g}",
            detail | {"verified": False},
        )
    return Verdict(
        True,
        f"{name} verified: probe distance {to_record:.4f} (tolerance {tolerance:g})",
        detail | {"verified": True},
    )


def of_weights(
    model: str | Path, adapter: str | Path | None = None, *, device: str = "cpu", by: str = "transformers"
) -> Fingerprint:
    """The fingerprint of a checkpoint (and adapter), computed here with transformers: what the
    training job records for the versions it registers."""
    from agent.checkpoint import checkpoint_system_prompt
    from agent.local_policy import LocalPolicy

    prompt = PromptSettings(resize=RESIZE, system_prompt=checkpoint_system_prompt(model, adapter))
    policy = LocalPolicy(model, adapter_dir=adapter, prompt=prompt, device=device)
    return Fingerprint(tuple(policy.score_tail(probe(prompt), TOKENS)), probe_key(prompt), by)
