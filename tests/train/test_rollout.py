"""Semi-online rollouts with a scripted engine: patching, ε, and what becomes history vs. target."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pytest
from PIL import Image

from agent.geometry import ResizeSettings, Size
from agent.parsing import format_response
from agent.prompt import PromptSettings, TextPart, Turn, prepare_image
from agent.trajectory import ActionLabel
from train.data import ExpertStep, ExpertTrajectory
from train.labels import expert_action
from train.matching import Expected, swipe_direction
from train.model import Sampling
from train.rollout import Generated, PatchSettings, RolloutEngine, RolloutSettings, SemiOnlineRollout

SCREEN = Size(1080, 2400)
PROMPT = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))
RESIZED = prepare_image(Image.new("RGB", SCREEN), PROMPT).geometry.resized


def png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", SCREEN, (shade, shade, shade)).save(buffer, "PNG")
    return buffer.getvalue()


LABELS = [
    ActionLabel(action="click", coordinate=(540, 1200), bbox=(440, 1100, 640, 1300)),
    ActionLabel(action="type", text="hello"),
    ActionLabel(action="terminate", status="success"),
]
TRAJECTORY = ExpertTrajectory(
    "Say hello",
    tuple(
        ExpertStep(label, SCREEN, png=png(40 * i), sha256=str(i), thought=f"stored thought {i}")
        for i, label in enumerate(LABELS)
    ),
    "test",
)
RIGHT = [format_response(expert_action(label, SCREEN, RESIZED), "mine") for label in LABELS]
WRONG = format_response(expert_action(ActionLabel(action="wait", time=1), SCREEN, RESIZED), "mine")


class ScriptEngine(RolloutEngine):
    """Answers the k-th request of step t with plan[t][k...] (t = assistant turns in the prompt)."""

    def __init__(self, plan: dict[int, list[str]], thought: str = "I tap the button") -> None:
        self.plan = {t: list(v) for t, v in plan.items()}
        self.thought = thought
        self.prompts: list[list[Turn]] = []

    def generate(self, turns: Sequence[Turn], n: int, sampling: Sampling) -> list[Generated]:
        self.prompts.append(list(turns))
        system = next(p.text for p in turns[0].parts if isinstance(p, TextPart))
        if "Global Task Objective" in system:  # the on-policy thought prompt
            return [Generated(f"<think>\n{self.thought}\n</think>")] * n
        step = sum(1 for t in turns if t.role == "assistant")
        return [Generated(self.plan[step].pop(0)) for _ in range(n)]


def run(plan: dict[int, list[str]], threshold: int, mode: str = "thought_free", n: int = 2):  # type: ignore[no-untyped-def]
    engine = ScriptEngine(plan)
    settings = RolloutSettings(n=n, patch=PatchSettings(mode=mode, threshold=threshold))  # type: ignore[arg-type]
    return SemiOnlineRollout(engine, settings, prompt=PROMPT).run(TRAJECTORY), engine


def test_without_patching_a_mismatch_ends_the_rollout_and_its_sample_stays() -> None:
    (good, bad), _ = run({0: [RIGHT[0], WRONG], 1: [RIGHT[1]], 2: [RIGHT[2]]}, threshold=0)
    assert [s.matched for s in good.steps] == [True, True, True]
    assert [s.reward.reward for s in good.steps] == [1.0, 1.0, 1.0]
    assert len(bad.steps) == 1
    assert not bad.alive
    assert bad.steps[0].response.text == WRONG  # the mismatched sample is kept, with its reward
    assert bad.steps[0].reward.reward == 0.1
    assert bad.matched_steps == 0
    assert good.matched_steps == 3


def test_one_patch_puts_the_expert_action_in_the_history_then_the_next_mismatch_ends_it() -> None:
    (good, patched), engine = run({0: [RIGHT[0], WRONG], 1: [RIGHT[1], WRONG], 2: [RIGHT[2]]}, threshold=1)
    assert patched.steps[0].patched
    assert patched.steps[0].response.text == WRONG  # the training target is the model's own sample
    assert patched.history[0] == format_response(expert_action(LABELS[0], SCREEN, RESIZED))
    assert "<think>\n\n</think>" in patched.history[0]  # thought-free: an empty think block
    assert good.history[0] == RIGHT[0]  # a match keeps the rollout's own text
    assert len(patched.steps) == 2
    assert not patched.alive
    assert patched.patches == 1
    # Different histories at step 1: two prompts, each with its own assistant turn.
    step1 = [p for p in engine.prompts if sum(t.role == "assistant" for t in p) == 1]
    assert len(step1) == 2


def test_unlimited_patching_runs_every_rollout_to_the_end_of_the_expert_trajectory() -> None:
    (rollout,), _ = run({0: [WRONG], 1: [WRONG], 2: [WRONG]}, threshold=-1, n=1)
    assert len(rollout.steps) == 3
    assert rollout.patches == 3
    assert all(s.patched for s in rollout.steps)


def test_identical_histories_share_one_prompt_with_n_samples() -> None:
    _, engine = run({0: [RIGHT[0], RIGHT[0]], 1: [RIGHT[1], RIGHT[1]], 2: [RIGHT[2], RIGHT[2]]}, threshold=0)
    assert len(engine.prompts) == 3  # one request per step for both rollouts


@pytest.mark.parametrize(
    ("mode", "thought"),
    [("off_policy_thought", "stored thought 0"), ("on_policy_thought", "I tap the button")],
)
def test_thought_patches_carry_the_stored_or_the_policy_written_thought(mode: str, thought: str) -> None:
    (rollout,), engine = run({0: [WRONG], 1: [RIGHT[1]], 2: [RIGHT[2]]}, threshold=1, mode=mode, n=1)
    action = expert_action(LABELS[0], SCREEN, RESIZED)
    assert rollout.history[0] == format_response(action, thought)
    if mode == "on_policy_thought":
        shadow = engine.prompts[1]
        hint = shadow[-1].parts[-1]
        assert isinstance(hint, TextPart)
        assert action.to_json() in hint.text  # the hint the policy explains, never a target


def test_an_expert_swipe_given_as_a_scroll_direction_is_injected_as_matching_finger_motion() -> None:
    label = ActionLabel(action="swipe", direction="down")  # scroll down: the finger moves up
    action = expert_action(label, SCREEN, RESIZED)
    assert swipe_direction(action.coordinate, action.coordinate2) == "up"  # type: ignore[union-attr]
    assert Expected(label, SCREEN).finger_direction() == "up"


def test_off_policy_thought_patches_on_the_real_thought_file(interchange_dir: Path) -> None:
    """The released file of pre-generated thoughts: every patched step carries its own thought and
    the expert's action in the screenshot's resized pixels; what the policy wrote stays the target."""
    from train.data import InterchangeSource, load_interchange

    (trajectory,) = load_interchange(
        InterchangeSource(path=interchange_dir / "thought.jsonl", stand_ins=True)
    )
    assert len(trajectory.steps) == 11
    assert all(s.thought for s in trajectory.steps)

    back = format_response(
        expert_action(ActionLabel(action="system_button", button="Back"), SCREEN, RESIZED), ""
    )

    class AlwaysWrong(RolloutEngine):  # the file has no Back press: every step mismatches
        def generate(self, turns: Sequence[Turn], n: int, sampling: Sampling) -> list[Generated]:
            return [Generated(back)] * n

    settings = RolloutSettings(n=1, patch=PatchSettings(mode="off_policy_thought", threshold=-1))
    (rollout,) = SemiOnlineRollout(AlwaysWrong(), settings, prompt=PROMPT).run(trajectory)
    assert rollout.patches == len(trajectory.steps)
    assert all(s.patched for s in rollout.steps)
    for step, patched, record in zip(trajectory.steps, rollout.history, rollout.steps, strict=True):
        assert patched == format_response(expert_action(step.expert, step.size, RESIZED), step.thought or "")
        assert step.thought
        assert step.thought.strip() in patched
        assert record.response.text == back  # the sample keeps its own text (and reward) as target
        assert not record.matched
    # The last prompt shows every earlier patch, in order, as the assistant's history.
    last_prompt = rollout.steps[-1].turns
    shown = [p.text for t in last_prompt if t.role == "assistant" for p in t.parts if isinstance(p, TextPart)]
    assert shown == rollout.history[:-1]


def test_expert_history_is_offline_rl_every_step_sees_the_experts_actions_and_no_rollout_ends() -> None:
    engine = ScriptEngine({0: [WRONG, RIGHT[0]], 1: [WRONG, WRONG], 2: [RIGHT[2], WRONG]})
    settings = RolloutSettings(n=2, patch=PatchSettings(threshold=0), history="expert")
    rollouts = SemiOnlineRollout(engine, settings, prompt=PROMPT).run(TRAJECTORY)
    expert = [format_response(expert_action(label, SCREEN, RESIZED)) for label in LABELS]
    for rollout in rollouts:
        assert len(rollout.steps) == 3  # ε = 0 would have ended the first at step 0
        assert rollout.alive
        assert rollout.history == expert  # a matched response is not kept either: the expert's text is
    assert [s.patched for s in rollouts[0].steps] == [True, True, False]
    assert [s.response.text for s in rollouts[1].steps] == [RIGHT[0], WRONG, WRONG]  # targets: own samples
    assert len(engine.prompts) == 3  # one shared prompt per step, n samples each


def test_a_statusless_terminate_is_patched_in_and_an_unwritable_label_ends_the_rollout_not_the_step() -> None:
    """Loading leaves trajectories with labels no policy could write out; one built by hand must
    still not kill a training step. A terminate without a status is an ordinary terminate."""
    labels = [ActionLabel(action="terminate"), ActionLabel(action="open", text=""), LABELS[0]]
    trajectory = ExpertTrajectory(
        "Odd labels",
        tuple(ExpertStep(label, SCREEN, png=png(i), sha256=f"odd{i}") for i, label in enumerate(labels)),
        "test",
    )
    engine = ScriptEngine({0: [WRONG], 1: [WRONG]})
    settings = RolloutSettings(n=1, patch=PatchSettings(threshold=-1))
    (rollout,) = SemiOnlineRollout(engine, settings, prompt=PROMPT).run(trajectory)
    assert rollout.history == [
        format_response(expert_action(ActionLabel(action="terminate", status="success"), SCREEN, RESIZED))
    ]
    assert [s.step for s in rollout.steps] == [0, 1]  # step 1's sample is kept, with its reward
    assert not rollout.alive
