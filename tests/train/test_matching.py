"""The matching rule and the rewards, pinned to hand-computed values (METHOD.md §3-4).

The screen is 1000x2000 original pixels and the model sees it resized to 500x1000, so a
predicted pixel (x, y) is the normalised point (x/500, y/1000) and an expert pixel (X, Y) is
(X/1000, Y/2000).
"""

from __future__ import annotations

import pytest

from agent.actions import action_from_dict
from agent.geometry import Size
from agent.parsing import parse_response
from agent.trajectory import ActionLabel
from train.matching import Expected, MatchSettings, match, swipe_direction
from train.rewards import score

ORIGINAL = Size(1000, 2000)
RESIZED = Size(500, 1000)
CODE = MatchSettings(
    boxes="all_boxes", answer_as="type", empty_text_matches=True, terminate_status=False, open_by_click=False
)


def expected(check_options: dict | None = None, **label) -> Expected:  # type: ignore[no-untyped-def,type-arg]
    options = ActionLabel.model_validate(check_options) if check_options else None
    return Expected.of(ActionLabel.model_validate(label), ORIGINAL, options)


def outcome(predicted: dict, target: Expected, settings: MatchSettings | None = None) -> tuple[bool, bool]:  # type: ignore[type-arg]
    result = match(action_from_dict(predicted), RESIZED, target, settings)
    return result.type_match, result.full_match


BUTTON = expected(action="click", coordinate=[500, 1000], bbox=[400, 900, 600, 1100])
POINT_ONLY = expected(action="click", coordinate=[500, 1000])
NESTED = expected(
    action="click", coordinate=[500, 1000], candidate_bbox=[[400, 900, 600, 1100], [0, 0, 1000, 2000]]
)


@pytest.mark.parametrize(
    ("predicted", "target", "settings", "want"),
    [
        # Inside the box: (0.5, 0.5).
        ({"action": "click", "coordinate": [250, 500]}, BUTTON, None, (True, True)),
        # x = 0.61: outside the box (0.4-0.6) but inside it enlarged 1.2x about its centre (0.38-0.62).
        ({"action": "click", "coordinate": [305, 500]}, BUTTON, None, (True, True)),
        # x = 0.63: outside the enlarged box, 0.13 from the expert point.
        ({"action": "click", "coordinate": [315, 500]}, BUTTON, None, (True, False)),
        # No box: within 0.04 of the point (0.03 away) matches, 0.05 away does not.
        ({"action": "click", "coordinate": [265, 500]}, POINT_ONLY, None, (True, True)),
        ({"action": "click", "coordinate": [275, 500]}, POINT_ONLY, None, (True, False)),
        # Enclosing containers: only the smallest box holding the expert point counts (Ours) ...
        ({"action": "click", "coordinate": [100, 100]}, NESTED, None, (True, False)),
        # ... and any listed box in the released code's rule.
        ({"action": "click", "coordinate": [100, 100]}, NESTED, CODE, (True, True)),
        # A long press is not a click, even on the spot.
        ({"action": "long_press", "coordinate": [250, 500], "time": 1}, BUTTON, None, (False, False)),
        (
            {"action": "click", "coordinate": [250, 500]},
            expected(action="long_press", coordinate=[500, 1000], time=2),
            None,
            (False, False),
        ),
        (
            {"action": "long_press", "coordinate": [250, 500], "time": 5},
            expected(action="long_press", coordinate=[500, 1000], time=2),
            None,
            (True, True),
        ),  # time ignored
    ],
)
def test_clicks_hit_the_enlarged_target_box_or_land_near_the_expert_point(
    predicted, target, settings, want
) -> None:  # type: ignore[no-untyped-def]
    assert outcome(predicted, target, settings) == want


FINGER_UP = {"action": "swipe", "coordinate": [250, 700], "coordinate2": [250, 200]}
FINGER_DOWN = {"action": "swipe", "coordinate": [250, 200], "coordinate2": [250, 700]}


@pytest.mark.parametrize(
    ("predicted", "target", "want"),
    [
        (FINGER_UP, expected(action="swipe", coordinate=[500, 1500], coordinate2=[500, 500]), (True, True)),
        (
            FINGER_DOWN,
            expected(action="swipe", coordinate=[500, 1500], coordinate2=[500, 500]),
            (True, False),
        ),
        # A stored *scroll* direction: scrolling down is a finger moving up.
        (FINGER_UP, expected(action="swipe", direction="down"), (True, True)),
        (FINGER_DOWN, expected(action="swipe", direction="down"), (True, False)),
        # Left and right are not swapped.
        (
            {"action": "swipe", "coordinate": [400, 500], "coordinate2": [100, 520]},
            expected(action="swipe", direction="left"),
            (True, True),
        ),
        # Options of an evaluation file add the direction to a label without coordinates.
        (FINGER_UP, expected({"action": "swipe", "direction": "down"}, action="swipe"), (True, True)),
        # A swipe that does not move has no direction.
        (
            {"action": "swipe", "coordinate": [250, 500], "coordinate2": [250, 500]},
            expected(action="swipe", direction="down"),
            (True, False),
        ),
        (
            {"action": "click", "coordinate": [250, 500]},
            expected(action="swipe", direction="down"),
            (False, False),
        ),
    ],
)
def test_swipes_match_by_the_finger_direction(predicted, target, want) -> None:  # type: ignore[no-untyped-def]
    assert outcome(predicted, target) == want


ICON_IN_GRID = {
    "action": "open",
    "text": "Maps",
    "candidate_bbox": [[0, 0, 1000, 2000], [100, 180, 140, 220], [0, 100, 1000, 400]],
}


@pytest.mark.parametrize(
    ("point", "settings", "want"),
    [
        ((60, 100), None, (True, True)),  # on the icon (its own box, the smallest listed)
        ((250, 500), None, (False, False)),  # elsewhere on the full-screen container: not opening Maps
        ((250, 120), None, (False, False)),  # on the row that holds the icon
        ((250, 500), MatchSettings(boxes="all_boxes"), (True, True)),  # the released code: any listed box
    ],
)
def test_open_by_click_takes_the_icons_own_box_not_a_container(point, settings, want) -> None:  # type: ignore[no-untyped-def]
    target = expected(ICON_IN_GRID, action="open", text="Maps")
    assert outcome({"action": "click", "coordinate": list(point)}, target, settings) == want


def test_open_by_click_prefers_the_labels_own_bbox() -> None:
    target = expected({**ICON_IN_GRID, "bbox": [600, 1000, 700, 1100]}, action="open", text="Maps")
    assert outcome({"action": "click", "coordinate": [325, 525]}, target) == (True, True)
    assert outcome({"action": "click", "coordinate": [60, 100]}, target) == (False, False)


def test_a_swipe_direction_is_its_dominant_axis_and_a_tie_is_vertical() -> None:
    assert swipe_direction((0, 0), (10, 3)) == "right"
    assert swipe_direction((0, 0), (-10, 3)) == "left"
    assert swipe_direction((0, 0), (5, 5)) == "down"
    assert swipe_direction((0, 0), (5, -5)) == "up"
    assert swipe_direction((3, 3), (3, 3)) is None


@pytest.mark.parametrize(
    ("predicted", "target", "settings", "want"),
    [
        (
            {"action": "type", "text": " hello "},
            expected(action="type", text="Hello World"),
            None,
            (True, True),
        ),
        (
            {"action": "type", "text": "Hello World!"},
            expected(action="type", text="hello world"),
            None,
            (True, True),
        ),
        (
            {"action": "type", "text": "goodbye"},
            expected(action="type", text="Hello World"),
            None,
            (True, False),
        ),
        # An empty prediction never matches (Ours); the released code lets it match anything.
        ({"action": "type", "text": ""}, expected(action="type", text="Hello"), None, (True, False)),
        ({"action": "type", "text": ""}, expected(action="type", text="Hello"), CODE, (True, True)),
        # An answer must be an answer (Ours); the released code wants a type action instead.
        ({"action": "answer", "text": "42"}, expected(action="answer", text="42"), None, (True, True)),
        ({"action": "type", "text": "42"}, expected(action="answer", text="42"), None, (False, False)),
        ({"action": "type", "text": "42"}, expected(action="answer", text="42"), CODE, (True, True)),
        ({"action": "answer", "text": "42"}, expected(action="answer", text="42"), CODE, (False, False)),
        ({"action": "open", "text": "clock"}, expected(action="open", text="Clock"), None, (True, True)),
        ({"action": "open", "text": "Calendar"}, expected(action="open", text="Clock"), None, (True, False)),
        # Opening an app by tapping its icon, when the data gives the icon's box.
        (
            {"action": "click", "coordinate": [60, 100]},
            expected(
                {"action": "open", "text": "Clock", "candidate_bbox": [[100, 180, 140, 220]]},
                action="open",
                text="Clock",
            ),
            None,
            (True, True),
        ),
        (
            {"action": "click", "coordinate": [250, 500]},
            expected(
                {"action": "open", "text": "Clock", "candidate_bbox": [[100, 180, 140, 220]]},
                action="open",
                text="Clock",
            ),
            None,
            (False, False),
        ),
        (
            {"action": "system_button", "button": "back"},
            expected(action="system_button", button="Back"),
            None,
            (True, True),
        ),
        (
            {"action": "system_button", "button": "Home"},
            expected(action="system_button", button="Back"),
            None,
            (True, False),
        ),
        ({"action": "key", "text": "enter"}, expected(action="key", text="ENTER"), None, (True, True)),
        ({"action": "key", "text": "DEL"}, expected(action="key", text="ENTER"), None, (True, False)),
        ({"action": "wait", "time": 9}, expected(action="wait", time=2), None, (True, True)),
        ({"action": "terminate", "status": "success"}, expected(action="wait", time=2), None, (False, False)),
        # Terminate compares its status when the expert has one (Ours); the released code does not.
        (
            {"action": "terminate", "status": "failure"},
            expected(action="terminate", status="success"),
            None,
            (True, False),
        ),
        (
            {"action": "terminate", "status": "failure"},
            expected(action="terminate", status="success"),
            CODE,
            (True, True),
        ),
        ({"action": "terminate", "status": "failure"}, expected(action="terminate"), None, (True, True)),
    ],
)
def test_text_buttons_keys_and_the_argument_free_actions(predicted, target, settings, want) -> None:  # type: ignore[no-untyped-def]
    assert outcome(predicted, target, settings) == want


def respond(think: str, action: str) -> str:
    return f"<think>\n{think}\n</think>\n<action>\n{action}\n</action>"


@pytest.mark.parametrize(
    ("response", "paper", "code"),
    [
        ("no tags at all", 0.0, 0.0),
        ("<think>\nlooking\n</think>\n<action>\n{not json}\n</action>", 0.0, 0.1),  # think, no action
        (respond("", '{"action": "click", "coordinate": [250, 500]}'), 0.0, 0.9),  # no thought: f = 0
        (respond("t", '{"action": "wait", "time": 1}'), 0.1, 0.19),  # wrong type
        (respond("", '{"action": "wait", "time": 1}'), 0.0, 0.09),
        (respond("t", '{"action": "click", "coordinate": [400, 900]}'), 0.5, 0.55),  # type only
        (respond("t", '{"action": "click", "coordinate": [250, 500]}'), 1.0, 1.0),  # full match
    ],
)
def test_rewards_in_the_paper_and_the_released_code_form(response: str, paper: float, code: float) -> None:
    parsed = parse_response(response)
    assert score(parsed, RESIZED, BUTTON, form="paper").reward == paper
    assert score(parsed, RESIZED, BUTTON, form="code").reward == code


def test_the_reward_reports_its_parts() -> None:
    result = score(
        parse_response(respond("t", '{"action": "click", "coordinate": [400, 900]}')), RESIZED, BUTTON
    )
    assert (result.format_ok, result.type_match, result.full_match) == (True, True, False)


def test_every_expert_step_of_the_sop_file_matches_itself_and_its_swipes_agree(interchange_dir) -> None:  # type: ignore[no-untyped-def]
    """On the real SOP test set: the expert's own action, resized as a model would see it, matches
    its step (candidate boxes, scroll directions and all); and each swipe's recorded finger motion
    is the opposite of its stored scroll direction for up/down, as the convention says."""
    from agent.geometry import smart_resize
    from agent.interchange import load_jsonl

    screen = Size(1080, 2400)  # AndroidControl's frames
    resized = smart_resize(screen)
    steps = 0
    for episode in load_jsonl(interchange_dir / "android_control_evaluation_std.jsonl"):
        for step in episode.steps:
            assert step.expert is not None
            target = Expected.of(step.expert, screen, step.check_options)
            data = step.expert.to_dict()
            for key in ("coordinate", "coordinate2"):
                if key in data:
                    x, y = data[key]
                    data[key] = [
                        round(x * resized.width / screen.width),
                        round(y * resized.height / screen.height),
                    ]
            own = action_from_dict(
                {k: v for k, v in data.items() if k not in ("bbox", "candidate_bbox", "direction")}
            )
            assert match(own, resized, target).full_match, (episode.external_id, step.index, data)
            if step.expert.action == "swipe" and step.check_options and step.check_options.direction:
                finger = swipe_direction(step.expert.coordinate, step.expert.coordinate2)  # type: ignore[arg-type]
                scroll = step.check_options.direction.value
                assert finger == {"up": "down", "down": "up"}.get(scroll, scroll)
            steps += 1
    assert steps == 8444


def test_the_target_box_holds_the_expert_point_even_on_its_edge() -> None:
    """Found by an independent reference: a point exactly on its element's edge was judged outside
    (centre +/- half size in floats), and the enclosing container became the target."""
    same = Size(1000, 1000)
    target = Expected(
        ActionLabel.model_validate(
            {
                "action": "click",
                "coordinate": [590, 110],
                "candidate_bbox": [[0, 0, 1000, 1000], [490, 110, 600, 220]],
            }
        ),
        same,
    )
    far = match(action_from_dict({"action": "click", "coordinate": [50, 950]}), same, target)
    assert (far.type_match, far.full_match) == (True, False)
    on = match(action_from_dict({"action": "click", "coordinate": [595, 200]}), same, target)
    assert on.full_match


def test_a_listed_box_that_does_not_hold_the_expert_point_is_not_the_target() -> None:
    elsewhere = expected(action="click", coordinate=[100, 200], candidate_bbox=[[500, 500, 600, 600]])
    assert outcome({"action": "click", "coordinate": [275, 275]}, elsewhere) == (True, False)
    assert outcome({"action": "click", "coordinate": [52, 100]}, elsewhere) == (
        True,
        True,
    )  # the distance rule


def test_an_open_labels_own_bbox_is_the_icon_even_beside_one_listed_box() -> None:
    target = expected(
        {"action": "open", "text": "Maps", "candidate_bbox": [[500, 500, 600, 600]]},
        action="open",
        text="Maps",
        bbox=[100, 100, 200, 200],
    )
    assert outcome({"action": "click", "coordinate": [75, 75]}, target) == (True, True)
    assert outcome({"action": "click", "coordinate": [275, 275]}, target) == (False, False)


def test_exact_thresholds_count_as_inside() -> None:
    same = Size(1000, 1000)
    point = Expected(ActionLabel(action="click", coordinate=(360, 190)), same)
    assert match(
        action_from_dict({"action": "click", "coordinate": [400, 190]}), same, point
    ).full_match  # 0.04
    box = Expected(
        ActionLabel(action="click", coordinate=(150, 500), candidate_bbox=[(100, 450, 200, 550)]), same
    )
    for x in (90, 210):  # the edges of the box enlarged 1.2x
        assert match(action_from_dict({"action": "click", "coordinate": [x, 500]}), same, box).full_match, x
