from __future__ import annotations

import json

import pytest

from agent.actions import (
    ACTION_NAMES,
    MAX_TEXT_CHARS,
    ActionError,
    Answer,
    Click,
    Key,
    LongPress,
    Open,
    Swipe,
    SystemButton,
    SystemButtonPress,
    Terminate,
    TerminateStatus,
    Type,
    Wait,
    action_from_dict,
    action_from_json,
)


def test_the_action_space_has_the_ten_uis1_actions_in_order() -> None:
    assert ACTION_NAMES == (
        "key",
        "click",
        "long_press",
        "swipe",
        "type",
        "answer",
        "system_button",
        "open",
        "wait",
        "terminate",
    )


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (Click(coordinate=(540, 1200)), '{"action": "click", "coordinate": [540, 1200]}'),
        (LongPress(coordinate=(3, 4), time=2), '{"action": "long_press", "coordinate": [3, 4], "time": 2}'),
        (
            LongPress(coordinate=(3, 4), time=1.5),
            '{"action": "long_press", "coordinate": [3, 4], "time": 1.5}',
        ),
        (
            Swipe(coordinate=(540, 1800), coordinate2=(540, 600)),
            '{"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]}',
        ),
        (Type(text="Anna ❤ 你好"), '{"action": "type", "text": "Anna ❤ 你好"}'),
        (Key(text="KEYCODE_ENTER"), '{"action": "key", "text": "KEYCODE_ENTER"}'),
        (SystemButtonPress(button=SystemButton.BACK), '{"action": "system_button", "button": "Back"}'),
        (Open(text="Zoho Meeting"), '{"action": "open", "text": "Zoho Meeting"}'),
        (Wait(time=2), '{"action": "wait", "time": 2}'),
        (Answer(text="42"), '{"action": "answer", "text": "42"}'),
        (Terminate(status=TerminateStatus.SUCCESS), '{"action": "terminate", "status": "success"}'),
    ],
)
def test_actions_serialise_to_the_exact_model_json_and_back(action: object, expected: str) -> None:
    assert action.to_json() == expected  # type: ignore[attr-defined]
    assert action_from_json(expected) == action


def test_system_button_is_case_insensitive_and_canonicalised() -> None:
    action = action_from_json('{"action": "system_button", "button": "home"}')
    assert action == SystemButtonPress(button=SystemButton.HOME)
    assert action.to_json() == '{"action": "system_button", "button": "Home"}'


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"action": "fly", "coordinate": [1, 2]}', "unknown_action"),
        ('{"coordinate": [1, 2]}', "unknown_action"),
        ('{"action": "click", "coordinate": [-1, 2]}', "bad_argument"),
        ('{"action": "click", "coordinate": [1.5, 2]}', "bad_argument"),
        ('{"action": "click", "coordinate": [true, 2]}', "bad_argument"),
        ('{"action": "click", "coordinate": [1, 2, 3]}', "bad_argument"),
        ('{"action": "click", "coordinate": "1,2"}', "bad_argument"),
        ('{"action": "click"}', "bad_argument"),
        ('{"action": "click", "coordinate": [1, 2], "extra": 1}', "bad_argument"),
        ('{"action": "system_button", "button": "Power"}', "bad_argument"),
        ('{"action": "terminate", "status": "done"}', "bad_argument"),
        ('{"action": "wait", "time": -1}', "bad_argument"),
        ('{"action": "wait", "time": NaN}', "bad_json"),
        ('{"action": "wait", "time": 1e400}', "bad_argument"),
        ('{"action": "open", "text": ""}', "bad_argument"),
        ('{"action": "key", "text": "ENTER; reboot"}', "bad_argument"),
        ('{"action": "click", "coordinate": [1, 2], "action": "type"}', "bad_json"),
        ("[1, 2]", "bad_json"),
        ("{", "bad_json"),
    ],
)
def test_invalid_actions_are_rejected_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ActionError) as info:
        action_from_json(text)
    assert info.value.reason == reason


def test_text_length_is_limited() -> None:
    action_from_dict({"action": "type", "text": "x" * MAX_TEXT_CHARS})
    with pytest.raises(ActionError):
        action_from_dict({"action": "type", "text": "x" * (MAX_TEXT_CHARS + 1)})


def test_actions_are_immutable() -> None:
    click = Click(coordinate=(1, 2))
    with pytest.raises(ValueError, match="frozen"):
        click.coordinate = (3, 4)  # type: ignore[misc]


def test_to_dict_is_plain_json() -> None:
    data = Swipe(coordinate=(1, 2), coordinate2=(3, 4)).to_dict()
    assert json.loads(json.dumps(data)) == {"action": "swipe", "coordinate": [1, 2], "coordinate2": [3, 4]}


@pytest.mark.parametrize("name", ["Click", "CLICK", " click"])
def test_an_action_name_in_another_case_or_spacing_is_an_unknown_action(name: str) -> None:
    """Action names are exact (the prompt spells them): "Click" is not a click with bad arguments."""
    from agent.actions import ActionError, action_from_dict

    with pytest.raises(ActionError) as caught:
        action_from_dict({"action": name, "coordinate": [1, 2]})
    assert caught.value.reason == "unknown_action"
