"""Semi-online rollouts with patching (METHOD.md §2), through a rollout engine.

N rollouts of one expert trajectory advance in lockstep. At step t each live rollout sees the
expert's screenshot S*_t and its *own* history, and samples a response. A match keeps the
response in its history; a mismatch is patched (the expert action goes into the history instead)
while the rollout has patched fewer than ε times, and ends the rollout otherwise. The mismatched
sample stays in the batch with its reward; a patch's text is history only, never a target.

With ``history: expert`` the same loop is offline RL: every rollout's history is the expert's,
whatever it sampled, so the group at step t is N samples of one prompt (plain per-step GRPO).

Patch variants: ``thought_free`` (the expert action after an empty think block, the default),
``off_policy_thought`` (the thought stored with the data), ``on_policy_thought`` (the policy
writes the thought, prompted with the expert action as a hint: a second, untrained generation).

Engines: ``TransformersEngine`` samples from the trainer's own model in-process; the vLLM engine
(``train.vllm_engine``) asks a vLLM server with the current weights loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from agent.actions import Action, ActionError
from agent.geometry import Size
from agent.parsing import first_tag, format_response, parse_response
from agent.prompt import ImagePart, PromptSettings, TextPart, Turn, build_conversation, prepare_image
from train.data import ExpertStep, ExpertTrajectory
from train.labels import expert_action
from train.matching import MatchSettings
from train.model import PolicyModel, Sampling
from train.rewards import RewardForm, StepReward, score

log = logging.getLogger(__name__)

PatchMode = Literal["thought_free", "off_policy_thought", "on_policy_thought"]

# The on-policy thought prompt (the paper's appendix A.10 in structure): the policy explains the
# expert's next action in its own words, without revealing that it was given the action.
THOUGHT_PROMPT = """You are writing the reasoning of a mobile GUI agent for one step of its task.

## Global Task Objective
{goal}

You see the conversation so far, the current screenshot and a hint: the action the agent takes
next. Write the agent's reasoning that leads to exactly that action: recall the goal, what has
been done so far, what the screen shows now, and why the next action follows. Describe the
target in words (no coordinates). Never mention that a hint was given.

Output Format: <think> ... </think>"""


class PatchSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: PatchMode = "thought_free"
    threshold: int = Field(1, ge=-1)  # ε: 0 = no patching, -1 = unlimited


class RolloutSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(8, gt=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(512, gt=0)
    patch: PatchSettings = PatchSettings()
    reward: RewardForm = "paper"
    # Whose actions the history holds: "own" (semi-online: the rollout's matched responses and its
    # patches) or "expert" (offline RL, the paper's Eq. 3: every step sees the expert's history, as
    # the patch mode writes it; no rollout ever ends early, so ε does not apply).
    history: Literal["own", "expert"] = "own"

    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.max_new_tokens)


@dataclass(frozen=True)
class Generated:
    text: str
    token_ids: torch.Tensor | None = None  # the sampled ids, when the engine has them


class RolloutEngine(Protocol):
    def generate(self, turns: Sequence[Turn], n: int, sampling: Sampling) -> list[Generated]: ...

    def generate_many(
        self, requests: Sequence[tuple[Sequence[Turn], int]], sampling: Sampling
    ) -> list[list[Generated]]:
        """``n`` responses to each of several prompts (a group's rollouts whose histories differ):
        one call per prompt here; an engine that can batch them overrides this."""
        return [self.generate(turns, n, sampling) for turns, n in requests]


class TransformersEngine(RolloutEngine):
    """Samples from a ``PolicyModel`` in this process (the learner's current weights); a group's
    prompts go through ``generate`` together, padded on the left."""

    def __init__(self, policy: PolicyModel, seed: int | None = None) -> None:
        self.policy = policy
        self._seed = seed
        self._calls = 0

    def generate(self, turns: Sequence[Turn], n: int, sampling: Sampling) -> list[Generated]:
        return self.generate_many([(turns, n)], sampling)[0]

    def generate_many(
        self, requests: Sequence[tuple[Sequence[Turn], int]], sampling: Sampling
    ) -> list[list[Generated]]:
        self._calls += 1
        seed = None if self._seed is None else self._seed * 1_000_003 + self._calls
        grouped = self.policy.generate_many(requests, sampling, seed=seed)
        return [[Generated(self.policy.decode(i), i) for i in ids] for ids in grouped]


@dataclass
class StepRecord:
    step: int
    turns: list[Turn]
    response: Generated
    reward: StepReward
    patched: bool = False  # the history got the expert's action instead of this response

    @property
    def matched(self) -> bool:
        return self.reward.full_match


@dataclass
class Rollout:
    trajectory: ExpertTrajectory
    steps: list[StepRecord] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    patches: int = 0
    alive: bool = True

    @property
    def matched_steps(self) -> int:
        """Steps matched before the first mismatch (the SOP count)."""
        count = 0
        for record in self.steps:
            if not record.matched:
                break
            count += 1
        return count


def step_action(step: ExpertStep, resized: Size) -> Action:
    """The expert step's action in resized pixels, its swipe direction as fixed at import."""
    return expert_action(step.expert, step.size, resized, step.expected().finger_direction())


def expert_response(step: ExpertStep, resized: Size, thought: str = "") -> str:
    """The expert step as the policy would have written it (patches, SFT targets, expert history)."""
    return format_response(step_action(step, resized), thought)


class SemiOnlineRollout:
    def __init__(
        self,
        engine: RolloutEngine,
        settings: RolloutSettings | None = None,
        *,
        prompt: PromptSettings | None = None,
        match: MatchSettings | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings or RolloutSettings()
        self.prompt = prompt or PromptSettings()
        self.match = match or MatchSettings()

    def run(
        self,
        trajectory: ExpertTrajectory,
        *,
        n: int | None = None,
        sampling: Sampling | None = None,
        threshold: int | None = None,
    ) -> list[Rollout]:
        """The group of rollouts of one expert trajectory."""
        n = n or self.settings.n
        sampling = sampling or self.settings.sampling()
        epsilon = self.settings.patch.threshold if threshold is None else threshold
        rollouts = [Rollout(trajectory) for _ in range(n)]
        images: list[ImagePart] = []
        for t, step in enumerate(trajectory.steps):
            images.append(prepare_image(step.screenshot(), self.prompt))
            alive = [r for r in rollouts if r.alive]
            if not alive:
                break
            by_history: dict[tuple[str, ...], list[Rollout]] = {}
            for r in alive:
                by_history.setdefault(tuple(r.history), []).append(r)
            # One prompt per distinct history, all of them in one engine call.
            groups = [
                (build_conversation(trajectory.goal, images, list(history), self.prompt), members)
                for history, members in by_history.items()
            ]
            answers = self.engine.generate_many(
                [(turns, len(members)) for turns, members in groups], sampling
            )
            for (turns, members), generated in zip(groups, answers, strict=True):
                for rollout, one in zip(members, generated, strict=True):
                    self._advance(rollout, t, turns, one, images[-1], epsilon, sampling)
        return rollouts

    def _advance(
        self,
        rollout: Rollout,
        t: int,
        turns: list[Turn],
        generated: Generated,
        image: ImagePart,
        epsilon: int,
        sampling: Sampling,
    ) -> None:
        step = rollout.trajectory.steps[t]
        parsed = parse_response(generated.text)
        reward = score(
            parsed, image.geometry.resized, step.expected(), form=self.settings.reward, settings=self.match
        )
        record = StepRecord(t, turns, generated, reward)
        rollout.steps.append(record)
        offline = self.settings.history == "expert"
        if not offline and reward.full_match:
            rollout.history.append(generated.text)
            return
        if not offline and not (epsilon < 0 or rollout.patches < epsilon):
            rollout.alive = False
            return
        try:
            patch = self._patch(rollout, t, turns, image, sampling)
        except ActionError as exc:  # loading leaves such labels out; a trajectory built by hand may not
            log.warning(
                "%s, step %d: the expert label cannot be patched in (%s); the rollout ends here",
                rollout.trajectory.source,
                t,
                exc,
            )
            rollout.alive = False
            return
        rollout.history.append(patch)
        record.patched = not reward.full_match
        if not offline:
            rollout.patches += 1

    def _patch(
        self, rollout: Rollout, t: int, turns: list[Turn], image: ImagePart, sampling: Sampling
    ) -> str:
        step = rollout.trajectory.steps[t]
        mode = self.settings.patch.mode
        if mode == "thought_free":
            return expert_response(step, image.geometry.resized)
        if mode == "off_policy_thought":
            return expert_response(step, image.geometry.resized, step.thought or "")
        action = step_action(step, image.geometry.resized)
        thought_turns = self._thought_prompt(rollout.trajectory.goal, turns, action)
        written = self.engine.generate(thought_turns, 1, sampling)[0].text
        return format_response(action, (first_tag(written, "think") or "").strip())

    @staticmethod
    def _thought_prompt(goal: str, turns: list[Turn], action: Action) -> list[Turn]:
        """The rollout's own dialogue under the thought-writing system prompt, with the hint added."""
        thought_turns = [Turn("system", (TextPart(THOUGHT_PROMPT.format(goal=goal)),))]
        for turn in turns[1:-1]:
            thought_turns.append(turn)
        last = turns[-1]
        hint = TextPart(f"## Next Action Hint: {action.to_json()}\nOutput Format: <think> ... </think>")
        thought_turns.append(Turn("user", (*(p for p in last.parts if isinstance(p, ImagePart)), hint)))
        return thought_turns
