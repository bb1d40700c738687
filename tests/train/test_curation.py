"""Curation: only trusted labels, corrected episodes up to the correction, black frames cut,
duplicates once, a held-out split fixed by the goal, and a manifest that says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.actions import action_from_dict
from agent.interchange import load_jsonl
from agent.parsing import ParseError, ParseErrorReason
from agent.trajectory import Episode, EpisodeStatus, ScreenshotRef, Step, StepSource
from train.curation import CurationSettings, curate, is_held_out


def step(
    i: int, action: dict[str, Any] | None, *, source: StepSource = StepSource.POLICY, **extra: Any
) -> Step:
    sha = f"{i:064x}"
    parsed = action_from_dict(action) if action else None
    fields: dict[str, Any] = {
        "index": i,
        "screenshot": ScreenshotRef(uri=f"/shots/{sha}.png", sha256=sha),
        "source": source,
        "device_action": parsed,
    }
    if parsed is not None:
        fields["raw_response"] = (
            f"<think>\nstep {i} thought\n</think>\n<action>\n{parsed.to_json()}\n</action>"
        )
    else:
        fields["parse_error"] = ParseError(reason=ParseErrorReason.NO_ACTION_TAG, detail="no action")
    return Step(**(fields | extra))


TAP = {"action": "click", "coordinate": [100, 200]}
BACK = {"action": "system_button", "button": "Back"}
DONE = {"action": "terminate", "status": "success"}
TYPE = {"action": "type", "text": "see you at 7"}


def episode(
    goal: str, steps: list[Step], ok: bool | None, source: str | None = "client", **labels: str
) -> Episode:
    tags = dict(labels)
    if source is not None:
        tags["label_source"] = source
    return Episode(
        goal=goal,
        status=EpisodeStatus.SUCCEEDED if ok else EpisodeStatus.FAILED,
        is_successful=ok,
        labels=tags,
        steps=steps,
    )


def goals_on_side(held: bool, count: int, settings: CurationSettings) -> list[str]:
    found = [g for g in (f"Task number {k}" for k in range(500)) if is_held_out(g, settings) is held]
    return found[:count]


def test_only_trusted_labels_make_training_data(tmp_path: Path) -> None:
    settings = CurationSettings(holdout_fraction=0.0)
    a, b, c, d, e = goals_on_side(False, 5, settings)
    episodes = [
        episode(a, [step(0, TAP), step(1, DONE)], True, "checker"),
        episode(b, [step(0, TAP), step(1, DONE)], None, None),  # nobody said how it went
        episode(c, [step(0, TAP), step(1, DONE)], True, "judge", judge="qwen", judge_prompt_version="1"),
        episode(d, [step(0, TAP), step(1, DONE)], False, "client"),  # failed, nothing corrected
        episode(e, [step(0, TAP), step(1, DONE)], True, None, feedback="success"),  # older feedback rows
    ]
    curated = curate(episodes, tmp_path / "set", settings)
    assert [x.goal for x in curated.train] == [a, e]
    m = curated.manifest
    assert m["dropped"] == {
        "no trusted label": 1,
        "untrusted label (judge)": 1,
        "failed without corrections": 1,
    }
    assert m["label_sources"] == {"checker": 1, "client": 1}
    trusting = curate(episodes, tmp_path / "judge", settings.model_copy(update={"trust_judge": True}))
    assert [x.goal for x in trusting.train] == [a, c, e]
    # Trusting the judge trusts the judge, not any other source a label names.
    f = goals_on_side(False, 6, settings)[5]
    heuristic = episode(f, [step(0, TAP), step(1, DONE)], True, "heuristic")
    again = curate(
        [*episodes, heuristic], tmp_path / "heuristic", settings.model_copy(update={"trust_judge": True})
    )
    assert f not in [x.goal for x in again.train]


def test_a_corrected_failure_is_kept_up_to_its_last_human_step(tmp_path: Path) -> None:
    settings = CurationSettings(holdout_fraction=0.0)
    (goal,) = goals_on_side(False, 1, settings)
    steps = [step(0, TAP), step(1, None), step(2, BACK, source=StepSource.HUMAN), step(3, TAP), step(4, DONE)]
    curated = curate([episode(goal, steps, False, "client")], tmp_path / "set", settings)
    (kept,) = curated.train
    # The unparseable step is gone (it was retried on the same screen); the steps after the human's are too.
    assert [s.expert.action for s in kept.steps] == ["click", "system_button"]  # type: ignore[union-attr]
    assert [s.index for s in kept.steps] == [0, 1]
    assert kept.steps[1].source is StepSource.HUMAN
    assert kept.steps[0].thought == "step 0 thought"  # the policy's own thought, for SFT with thoughts
    assert kept.labels["curated_as"] == "corrected"
    on_disk = load_jsonl(curated.train_file)
    assert [len(x.steps) for x in on_disk] == [2]
    assert on_disk[0].external_id == kept.labels["source_episode"]


def test_a_failure_with_several_corrections_is_kept_up_to_the_last_of_them(tmp_path: Path) -> None:
    settings = CurationSettings(holdout_fraction=0.0)
    (goal,) = goals_on_side(False, 1, settings)
    steps = [
        step(0, TAP),
        step(1, BACK, source=StepSource.HUMAN),
        step(2, TAP),
        step(3, TYPE, source=StepSource.HUMAN),
        step(4, TAP),
        step(5, DONE),
    ]
    curated = curate([episode(goal, steps, False, "client")], tmp_path / "set", settings)
    (kept,) = curated.train
    assert [s.expert.to_dict() for s in kept.steps] == [TAP, BACK, TAP, TYPE]  # type: ignore[union-attr]
    assert [s.source.value for s in kept.steps] == ["policy", "human", "policy", "human"]
    assert [s.index for s in kept.steps] == [0, 1, 2, 3]
    assert curated.manifest["steps"] == 4


def test_a_failed_step_cuts_the_trajectory_before_it(tmp_path: Path) -> None:
    settings = CurationSettings(holdout_fraction=0.0)
    a, b = goals_on_side(False, 2, settings)
    offline = "device error: emulator-5554: device offline"
    succeeded = [step(0, TAP), step(1, TYPE), step(2, BACK, error=offline), step(3, TAP), step(4, DONE)]
    # In a corrected failure too: the cut comes before the correction that followed the failed step.
    corrected = [
        step(0, TAP),
        step(1, BACK, error=offline),
        step(2, TYPE, source=StepSource.HUMAN),
        step(3, DONE),
    ]
    curated = curate([episode(a, succeeded, True), episode(b, corrected, False)], tmp_path / "set", settings)
    assert [x.goal for x in curated.train] == [a, b]
    kept = [[s.expert.to_dict() for s in x.steps] for x in curated.train]  # type: ignore[union-attr]
    assert kept == [[TAP, TYPE], [TAP]]
    assert curated.manifest["cut"] == {"failed step": 2}


def test_black_frames_cut_the_trajectory_and_duplicates_are_kept_once(tmp_path: Path) -> None:
    settings = CurationSettings(holdout_fraction=0.0)
    a, b = goals_on_side(False, 2, settings)
    black = step(1, TAP, extra={"black_frame": "secure app"})
    episodes = [
        episode(a, [step(0, TAP), black, step(2, DONE)], True),
        episode(b, [step(0, TAP), step(1, DONE)], True),
        episode(f"  {b.upper()} ", [step(0, TAP), step(1, DONE)], True),  # the same task and actions again
        episode(b, [step(0, BACK), step(1, DONE)], True),  # same goal, other actions: kept
    ]
    curated = curate(episodes, tmp_path / "set", settings)
    assert [len(x.steps) for x in curated.train] == [1, 2, 2]
    assert curated.manifest["cut"] == {"black frame": 1}
    assert curated.manifest["dropped"] == {"duplicate": 1}


def test_the_held_out_split_is_fixed_by_the_goal_and_never_trained_on(tmp_path: Path) -> None:
    settings = CurationSettings(holdout_fraction=0.3)
    held = goals_on_side(True, 3, settings)
    kept = goals_on_side(False, 5, settings)
    episodes = [episode(g, [step(0, TAP), step(1, DONE)], True) for g in [*held, *kept]]
    first = curate(episodes, tmp_path / "one", settings)
    assert sorted(x.goal for x in first.holdout) == sorted(held)
    assert sorted(x.goal for x in first.train) == sorted(kept)
    # The same goal again later (another episode of it) lands on the same side.
    later = [
        *episodes,
        episode(held[0], [step(0, BACK), step(1, DONE)], True),
        episode(kept[0], [step(0, BACK), step(1, DONE)], True),
    ]
    second = curate(later, tmp_path / "two", settings, previous=first.manifest)
    assert {x.goal for x in second.holdout} == set(held)
    assert second.manifest["new_train"] == 1  # only the new episode of a training goal is new
    share = sum(is_held_out(f"goal {k}", settings) for k in range(2000)) / 2000
    assert 0.26 < share < 0.34
    # The same goal in another case or spacing is the same goal: it cannot land on both sides.
    for goal in [*held, *kept]:
        for variant in (goal.upper(), f"  {goal.replace(' ', '   ')} ", goal.title()):
            assert is_held_out(variant, settings) is is_held_out(goal, settings), variant


def test_the_manifest_pins_the_files(tmp_path: Path) -> None:
    import hashlib

    settings = CurationSettings(holdout_fraction=0.0)
    (goal,) = goals_on_side(False, 1, settings)
    curated = curate([episode(goal, [step(0, TAP), step(1, DONE)], True)], tmp_path / "set", settings)
    manifest = json.loads((tmp_path / "set" / "manifest.json").read_text())
    assert manifest["files"]["train.jsonl"] == hashlib.sha256(curated.train_file.read_bytes()).hexdigest()
    assert manifest["train"] == 1
    assert manifest["steps"] == 2
    assert manifest["episodes"]["train"] == [curated.train[0].labels["source_episode"]]
