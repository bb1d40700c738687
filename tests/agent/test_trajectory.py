from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent.actions import Click, Wait
from agent.parsing import parse_response
from agent.trajectory import ActionLabel, Episode, EpisodeStatus, ScreenshotRef, Step, StepTimings


def _step(index: int, **kw: object) -> Step:
    return Step(index=index, screenshot=ScreenshotRef(uri=f"s{index}.png"), **kw)  # type: ignore[arg-type]


def test_a_policy_step_records_the_response_both_actions_and_timings() -> None:
    parsed = parse_response('<think>t</think><action>{"action": "click", "coordinate": [546, 1204]}</action>')
    step = _step(
        0,
        raw_response="<think>t</think>...",
        action=parsed.action,
        device_action=Click(coordinate=(540, 1200)),
        timings=StepTimings(policy_s=0.8, device_s=0.2),
        model_version="ui-s1-7b@1",
    )
    again = Step.model_validate_json(step.model_dump_json())
    assert again == step
    assert again.action == Click(coordinate=(546, 1204))


def test_a_parse_failure_is_recorded_instead_of_an_action() -> None:
    parsed = parse_response("I think I should tap the button")
    step = _step(0, raw_response="I think I should tap the button", parse_error=parsed.error)
    assert Step.model_validate_json(step.model_dump_json()).parse_error == parsed.error
    with pytest.raises(ValidationError, match="not both"):
        _step(0, action=Wait(), parse_error=parsed.error)


def test_episode_refuses_unknown_schema_versions_and_out_of_order_steps() -> None:
    episode = Episode(goal="g", steps=[_step(0), _step(1)])
    data = episode.model_dump(mode="json")
    assert data["schema_version"] == 1
    with pytest.raises(ValidationError, match="schema_version"):
        Episode.model_validate({**data, "schema_version": 2})
    with pytest.raises(ValidationError, match="step 1 has index 2"):
        Episode(goal="g", steps=[_step(0), _step(2)])


def test_screenshot_hash_must_be_sha256_hex() -> None:
    ScreenshotRef(uri="x", sha256="0" * 64)
    with pytest.raises(ValidationError):
        ScreenshotRef(uri="x", sha256="not-a-hash")


def test_status_knows_when_an_episode_is_finished() -> None:
    assert not EpisodeStatus.RUNNING.finished
    assert EpisodeStatus.CANCELLED.finished
    assert EpisodeStatus.ERROR.finished


def test_labels_keep_dataset_numbers_and_unknown_keys() -> None:
    label = ActionLabel.model_validate(
        {"action": "click", "coordinate": [540.5, 2], "bbox": [-5, 0, 10, 10], "note": 1}
    )
    assert label.to_dict() == {
        "action": "click",
        "coordinate": [540.5, 2],
        "bbox": [-5, 0, 10, 10],
        "note": 1,
    }
    with pytest.raises(ValidationError, match="unknown action"):
        ActionLabel(action="fly")
    assert ActionLabel.from_action(Click(coordinate=(1, 2))).to_dict() == {
        "action": "click",
        "coordinate": [1, 2],
    }
