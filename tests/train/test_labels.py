"""Expert labels as training uses them: swipe conventions, labels no policy could write, patches."""

from __future__ import annotations

import math
import random

import pytest

from agent.actions import ActionError, Open, Swipe, Terminate, TerminateStatus
from agent.geometry import ResizeSettings, Size, smart_resize
from agent.parsing import parse_response
from agent.trajectory import ActionLabel
from train.labels import contradicts, expert_action, finger_direction, label_problem, swipe_direction
from train.matching import Expected, match

SCREEN = Size(1080, 2400)
RESIZED = Size(308, 672)


def test_a_stored_direction_is_read_in_its_datasets_convention_and_wins_over_the_coordinates() -> None:
    down_scroll = ActionLabel(action="swipe", direction="down")
    assert finger_direction(down_scroll, "scroll") == "up"  # AndroidControl: scrolling down, finger up
    assert finger_direction(down_scroll, "finger") == "down"
    assert finger_direction(ActionLabel(action="swipe", direction="left"), "scroll") == "left"  # not swapped
    # Coordinates say the finger went down; the stored scroll direction says up: the label wins.
    both = ActionLabel(action="swipe", coordinate=(540, 600), coordinate2=(540, 1800), direction="down")
    assert finger_direction(both, "scroll") == "up"
    assert contradicts(both, "scroll")
    assert not contradicts(both, "finger")
    injected = expert_action(both, SCREEN, RESIZED, finger_direction(both, "scroll"))
    assert isinstance(injected, Swipe)
    assert swipe_direction(injected.coordinate, injected.coordinate2) == "up"


def compass(dx: float, dy: float) -> str:
    """The test's own reading of a motion (screen y points down), by its angle: within 45 degrees
    of an axis is that axis, exactly 45 degrees is vertical."""
    angle = math.degrees(math.atan2(dy, dx))
    if any(math.isclose(abs(angle), edge, abs_tol=1e-9) for edge in (45.0, 135.0)):
        return "down" if dy > 0 else "up"
    if -45 < angle < 45:
        return "right"
    if angle > 135 or angle < -135:
        return "left"
    return "down" if angle > 0 else "up"


def test_the_compass_reads_motions_as_a_person_would() -> None:
    assert [compass(*m) for m in ((5, 1), (-5, 1), (1, 5), (1, -5), (3, 3), (-3, -3))] == [
        "right",
        "left",
        "down",
        "up",
        "down",
        "up",
    ]


def test_a_swipe_patch_keeps_its_labels_direction_after_scaling_and_rounding() -> None:
    """Per-axis scaling and rounding turn near-diagonal swipes the other way (39 of 20,000 before);
    clamping can flatten one. Every on-screen swipe must keep its direction at real resize sizes."""
    rng = random.Random(7)
    screens = [Size(1080, 2400), Size(1440, 3120), Size(720, 1280), Size(1080, 1920)]
    budgets = [ResizeSettings(max_pixels=tokens * 28 * 28) for tokens in (32, 64, 128, 1280, 12800)]
    checked = 0
    for _ in range(20_000):
        screen = rng.choice(screens)
        resized = smart_resize(screen, rng.choice(budgets))
        start = (rng.uniform(0, screen.width - 1), rng.uniform(0, screen.height - 1))
        if rng.random() < 0.5:  # near-diagonal: the two axes within a few pixels of each other
            dx = rng.uniform(-400, 400)
            dy = (abs(dx) + rng.uniform(-3, 3)) * rng.choice((-1, 1))
        else:
            dx, dy = rng.uniform(-800, 800), rng.uniform(-800, 800)
        end = (start[0] + dx, start[1] + dy)
        if not (0 <= end[0] < screen.width and 0 <= end[1] < screen.height):
            continue
        label = ActionLabel(action="swipe", coordinate=start, coordinate2=end)
        wanted = compass(dx, dy)
        assert finger_direction(label, "finger") == wanted
        action = expert_action(label, screen, resized, wanted)
        assert isinstance(action, Swipe)
        moved = (action.coordinate2[0] - action.coordinate[0], action.coordinate2[1] - action.coordinate[1])
        assert compass(*moved) == wanted, (screen, resized, start, end)
        assert match(action, resized, Expected(label, screen, "finger")).full_match
        checked += 1
    assert checked > 10_000


def test_a_statusless_terminate_is_a_terminate_and_a_status_is_normalised() -> None:
    action = expert_action(ActionLabel(action="terminate"), SCREEN, RESIZED)
    assert isinstance(action, Terminate)
    assert action.status is TerminateStatus.SUCCESS
    failed = expert_action(ActionLabel(action="terminate", status=" Failure "), SCREEN, RESIZED)
    assert isinstance(failed, Terminate)
    assert failed.status is TerminateStatus.FAILURE
    # Matching compares no status the expert did not give.
    said = parse_response(
        '<think>\ndone\n</think>\n<action>\n{"action": "terminate", "status": "failure"}\n</action>'
    )
    assert said.action is not None
    assert match(said.action, RESIZED, Expected(ActionLabel(action="terminate"), SCREEN)).full_match


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        (ActionLabel(action="open", text=""), "open"),
        (ActionLabel(action="open"), "open"),
        (ActionLabel(action="click"), "click"),
        (ActionLabel(action="swipe"), "swipe"),
        (ActionLabel(action="key", text="rm -rf /"), "key"),
        (ActionLabel(action="system_button", button="Power"), "system_button"),
        (ActionLabel(action="terminate", status="maybe"), "terminate"),
    ],
)
def test_a_label_no_policy_could_write_is_named_with_its_reason(label: ActionLabel, reason: str) -> None:
    problem = label_problem(label, SCREEN)
    assert problem is not None
    assert problem.startswith(reason)
    with pytest.raises(ActionError):
        expert_action(label, SCREEN, RESIZED)


def test_labels_a_policy_could_write_have_no_problem() -> None:
    for label in (
        ActionLabel(action="open", text="Clock"),
        ActionLabel(action="click", coordinate=(1079.6, 2399.7)),  # fractional, at the very edge
        ActionLabel(action="swipe", direction="up"),
        ActionLabel(action="terminate"),
        ActionLabel(action="wait"),
    ):
        assert label_problem(label, SCREEN) is None, label
    assert isinstance(expert_action(ActionLabel(action="open", text="Clock"), SCREEN, RESIZED), Open)
