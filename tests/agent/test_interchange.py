from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agent.actions import Click, Type
from agent.interchange import InterchangeError, episode_to_record, load_jsonl, read_jsonl, write_jsonl
from agent.trajectory import ActionLabel, Episode, ScreenshotRef, Step, StepSource, SwipeDirection

GOLDEN = Path(__file__).parent / "golden"


def _stable(episode: Episode) -> dict:  # type: ignore[type-arg]
    return episode.model_dump(mode="json", exclude={"id", "created_at"})


def test_golden_interchange_round_trips_byte_for_byte() -> None:
    # The golden file writes keys in the schema's canonical order; other files round-trip as objects.
    source = (GOLDEN / "interchange.jsonl").read_text(encoding="utf-8")
    episodes = list(read_jsonl(source.splitlines()))
    out = io.StringIO()
    assert write_jsonl(episodes, out) == 2
    assert out.getvalue() == source


def test_golden_import_gives_the_pinned_schema_v1_episode() -> None:
    episodes = load_jsonl(GOLDEN / "interchange.jsonl")
    expected = json.loads((GOLDEN / "trajectory_v1.json").read_text(encoding="utf-8"))
    assert [_stable(e) for e in episodes] == expected
    # And the v1 JSON reads back to the same episodes.
    reread = [
        Episode.model_validate({**e, "id": ep.id, "created_at": ep.created_at})
        for e, ep in zip(expected, episodes, strict=True)
    ]
    assert reread == episodes


def test_imported_steps_are_expert_steps_with_labels_in_original_pixels() -> None:
    first, second = load_jsonl(GOLDEN / "interchange.jsonl")
    click = first.steps[1]
    assert click.source is StepSource.EXPERT
    assert click.expert is not None
    assert click.expert.coordinate == (540.0, 389.8351648351648)
    assert click.expert.bbox == (360, 327, 695, 466)
    assert click.action is None
    assert click.raw_response is None
    assert first.steps[0].thought == "Settings holds the Wi-Fi switch."
    assert second.external_id == 8193
    assert second.extra == {"split": "test"}
    assert second.steps[2].check_options is not None
    assert second.steps[2].check_options.direction is SwipeDirection.DOWN
    assert second.steps[3].extra == {"annotation": "GOOD"}
    assert second.is_successful is False


def test_own_traffic_exports_the_executed_action() -> None:
    episode = Episode(
        goal="Open Clock",
        is_successful=True,
        steps=[
            Step(
                index=0,
                screenshot=ScreenshotRef(uri="a.png"),
                raw_response="r",
                action=Click(coordinate=(10, 20)),
                device_action=Click(coordinate=(11, 22)),
            ),
            Step(index=1, screenshot=ScreenshotRef(uri="b.png"), raw_response="garbage"),
            Step(
                index=2,
                screenshot=ScreenshotRef(uri="c.png"),
                source=StepSource.HUMAN,
                device_action=Type(text="x"),
                expert=ActionLabel(action="type", text="07:30"),
            ),
        ],
    )
    record = episode_to_record(episode)
    assert record == {
        "goal": "Open Clock",
        "is_successful": True,
        "steps": [
            {"action_content": {"action": "click", "coordinate": [11, 22]}, "screenshot": "a.png"},
            {"action_content": {"action": "type", "text": "07:30"}, "screenshot": "c.png"},
        ],
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ('{"steps": []}', "missing 'goal'"),
        ('{"goal": "g", "steps": {}}', "'steps' must be a list"),
        ('{"goal": "g", "steps": [{"screenshot": "a"}]}', "needs 'screenshot' and 'action_content'"),
        (
            '{"goal": "g", "steps": [{"screenshot": "a", "action_content": {"action": "fly"}}]}',
            "unknown action",
        ),
        (
            '{"goal": "g", "steps": [{"screenshot": "a", "action_content": {"action": "click", "coordinate": [-1, 2]}}]}',
            "greater than or equal to 0",
        ),
    ],
)
def test_a_corrupt_line_is_reported_with_its_number(line: str, message: str) -> None:
    good = (GOLDEN / "interchange.jsonl").read_text(encoding="utf-8").splitlines()[0]
    with pytest.raises(InterchangeError, match=message) as info:
        list(read_jsonl([good, "", line], source="upload.jsonl"))
    assert info.value.where.startswith("upload.jsonl:3")


@pytest.mark.parametrize(
    ("name", "episodes", "steps"),
    [
        ("android_control_train_example.jsonl", 32, 206),
        ("android_control_evaluation_std.jsonl", 1543, 8444),
        ("thought.jsonl", 1, 11),
    ],
)
def test_real_interchange_files_import_and_export_without_loss(
    interchange_dir: Path, name: str, episodes: int, steps: int
) -> None:
    path = interchange_dir / name
    imported = load_jsonl(path)
    assert len(imported) == episodes
    assert sum(len(e.steps) for e in imported) == steps
    originals = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [episode_to_record(e) for e in imported] == originals
    # Through the schema's own JSON form as well (what the store writes).
    again = [Episode.model_validate_json(e.model_dump_json()) for e in imported]
    assert [episode_to_record(e) for e in again] == originals
