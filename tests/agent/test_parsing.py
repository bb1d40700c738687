from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.actions import Click, Swipe, Terminate, TerminateStatus, Type
from agent.parsing import MAX_RESPONSE_CHARS, ParseErrorReason, format_response, parse_response

GOOD = '<think>\nThe Wi-Fi toggle is at the top.\n</think>\n<action>\n{"action": "click", "coordinate": [540, 300]}\n</action>'


def test_a_well_formed_response_parses_to_its_action_and_thought() -> None:
    parsed = parse_response(GOOD)
    assert parsed.ok
    assert parsed.format_ok
    assert parsed.think == "The Wi-Fi toggle is at the top."
    assert parsed.action == Click(coordinate=(540, 300))
    assert parsed.error is None


def test_the_first_action_block_wins_and_text_around_it_is_ignored() -> None:
    text = (
        'Sure!<think>a</think> noise <action>{"action": "type", "text": "hi"}</action>'
        '<action>{"action": "click", "coordinate": [1, 1]}</action><|im_end|>'
    )
    assert parse_response(text).action == Type(text="hi")


def test_missing_think_still_parses_but_is_not_format_ok() -> None:
    parsed = parse_response('<action>{"action": "terminate", "status": "success"}</action>')
    assert parsed.action == Terminate(status=TerminateStatus.SUCCESS)
    assert parsed.think is None
    assert not parsed.format_ok
    empty_think = parse_response(
        '<think>\n\n</think><action>{"action": "terminate", "status": "failure"}</action>'
    )
    assert empty_think.ok
    assert not empty_think.format_ok


def test_each_failure_has_its_reason() -> None:
    cases = {
        "<think>hmm</think> I would click OK": ParseErrorReason.NO_ACTION_TAG,
        '<action>{"action": "click", "coordinate": [1, 2]}': ParseErrorReason.NO_ACTION_TAG,
        "<action>{'action': 'click'}</action>": ParseErrorReason.BAD_JSON,
        '<action>{"action": "click", "coordinate": [1, 2]} extra</action>': ParseErrorReason.BAD_JSON,
        '<action>{"action": "teleport"}</action>': ParseErrorReason.UNKNOWN_ACTION,
        '<action>{"action": "click", "coordinate": [1]}</action>': ParseErrorReason.BAD_ARGUMENT,
        "<action>" + "[" * 100_000 + "</action>": ParseErrorReason.BAD_JSON,
        "x" * (MAX_RESPONSE_CHARS + 1): ParseErrorReason.TOO_LONG,
    }
    for text, reason in cases.items():
        parsed = parse_response(text)
        assert not parsed.ok, text[:80]
        assert parsed.error is not None
        assert parsed.error.reason == reason, text[:80]
        assert len(parsed.error.detail) <= 500


def test_format_response_is_the_trained_layout_and_round_trips() -> None:
    action = Swipe(coordinate=(540, 1800), coordinate2=(540, 600))
    text = format_response(action)
    assert text == (
        '<think>\n\n</think>\n<action>\n{"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]}'
        "\n</action>"
    )
    assert parse_response(text).action == action
    assert parse_response(format_response(action, "scroll the list")).think == "scroll the list"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    parsed = parse_response(text)
    assert parsed.ok != (parsed.error is not None)


_fragments = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<action>",
        "</action>",
        "{",
        "}",
        "[",
        "]",
        '"action"',
        ":",
        ",",
        '"click"',
        '"coordinate"',
        "1",
        "-1",
        "1e999",
        "NaN",
        "null",
        "\\u0000",
        "\n",
        "你好",
        "🙂",
        "\x00",
        '"',
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_fragments, st.text(max_size=5)), max_size=60))
def test_adversarial_tag_and_json_soup_never_raises(parts: list[str]) -> None:
    parsed = parse_response("".join(parts))
    assert parsed.ok != (parsed.error is not None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.text(max_size=40))
def test_any_json_in_the_action_block_gives_an_action_or_a_typed_error(value: object, think: str) -> None:
    text = f"<think>{think}</think><action>{json.dumps(value)}</action>"
    parsed = parse_response(text)
    if parsed.ok:
        assert isinstance(value, dict)
        assert parsed.action is not None
        assert json.loads(parsed.action.to_json())["action"] == value["action"]
    else:
        assert parsed.error is not None
        assert parsed.error.reason in set(ParseErrorReason)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=10_000),
    st.text(max_size=200).filter(lambda t: "</think>" not in t),
)
def test_formatted_clicks_round_trip(x: int, y: int, think: str) -> None:
    action = Click(coordinate=(x, y))
    parsed = parse_response(format_response(action, think))
    assert parsed.action == action
    assert parsed.think == think.strip()


def test_huge_unclosed_tags_are_handled_quickly() -> None:
    # Quadratic regex scanning would take minutes here; first_tag is one pass.
    parsed = parse_response("<think>" * 25_000 + "<action>" * 3_000)
    assert parsed.error is not None
    assert parsed.error.reason == ParseErrorReason.NO_ACTION_TAG
