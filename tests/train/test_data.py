"""Expert data sources: the simulated experts, interchange files, the trajectory store; split and manifest."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from PIL import Image

from agent.store import TrajectoryStore
from agent.trajectory import ActionLabel, Episode, EpisodeStatus, ScreenshotRef, Step, StepSource
from train.data import DataError, InterchangeSource, SimSource, StoreSource, load, manifest, split


def test_simulated_experts_give_the_same_trajectories_whatever_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = load([SimSource(tasks=["wifi_on", "phone_number_question"])])
    monkeypatch.setattr(time, "strftime", lambda *_: "23:59")  # the phone's clock would show this
    again = load([SimSource(tasks=["wifi_on", "phone_number_question"])])
    assert [t.id for t in first] == [t.id for t in again]
    wifi, question = first
    assert [s.expert.action for s in wifi.steps] == ["open", "click", "click", "terminate"]
    assert [s.expert.action for s in question.steps][-2:] == ["answer", "terminate"]
    assert wifi.steps[1].expert.bbox is not None  # the tapped element's bounds, as datasets record them
    assert all(s.thought for s in wifi.steps)
    assert wifi.steps[0].screenshot().open().size == (1080, 2400)


def test_interchange_needs_its_images_or_an_explicit_stand_in(interchange_dir: Path) -> None:
    path = interchange_dir / "android_control_train_example.jsonl"
    with pytest.raises(DataError, match="not found"):
        load([InterchangeSource(path=path, limit=2)])
    loaded = load([InterchangeSource(path=path, stand_ins=True)])
    assert len(loaded) == 32
    assert sum(len(t.steps) for t in loaded) == 206


def test_interchange_images_are_read_beside_the_file(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (540, 1200), (1, 2, 3)).save(buffer, "PNG")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(buffer.getvalue())
    record = {
        "goal": "g",
        "is_successful": True,
        "steps": [
            {"screenshot": "images/a.png", "action_content": {"action": "click", "coordinate": [10, 20]}}
        ],
    }
    (tmp_path / "data.jsonl").write_text(json.dumps(record) + "\n")
    (trajectory,) = load([InterchangeSource(path=tmp_path / "data.jsonl")])
    assert trajectory.steps[0].size == (540, 1200)
    assert trajectory.steps[0].screenshot().data == buffer.getvalue()


def _png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (100, 200), (shade, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


def test_the_store_gives_trusted_successful_episodes_and_corrected_prefixes_only(tmp_path: Path) -> None:
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "shots")
    store.migrate()
    click = ActionLabel(action="click", coordinate=(5, 5))

    def step(i: int, source: StepSource = StepSource.POLICY) -> Step:
        ref = store.screenshots.put(_png(i * 10), 100, 200)
        from agent.actions import action_from_dict

        return Step(
            index=i,
            screenshot=ScreenshotRef(uri=ref.uri, sha256=ref.sha256),
            source=source,
            device_action=action_from_dict({"action": "click", "coordinate": [5, 5 + i]}),
            expert=click if source is StepSource.HUMAN else None,
        )

    ok, failed = EpisodeStatus.SUCCEEDED, EpisodeStatus.FAILED
    person = {"label_source": "client", "feedback": "success"}
    store.save(Episode(goal="good", status=ok, is_successful=True, labels=person, steps=[step(0), step(1)]))
    store.save(
        Episode(
            goal="corrected",
            status=failed,
            is_successful=False,
            labels={"label_source": "client", "feedback": "failure"},
            steps=[step(0), step(1, StepSource.HUMAN), step(2)],
        )
    )
    store.save(Episode(goal="failed", status=failed, is_successful=False, labels=person, steps=[step(0)]))
    store.save(Episode(goal="unlabelled", status=ok, steps=[step(0)]))
    # Successful by the policy's own word or the judge's only: never expert data by default.
    store.save(Episode(goal="self-reported", status=ok, is_successful=True, steps=[step(0)]))
    judged = {"label_source": "judge"}
    store.save(Episode(goal="judged", status=ok, is_successful=True, labels=judged, steps=[step(0)]))
    source = StoreSource(url=store.url, screenshot_dir=tmp_path / "shots")
    loaded = {t.goal: t for t in load([source])}
    assert set(loaded) == {"good", "corrected"}
    assert len(loaded["good"].steps) == 2
    assert len(loaded["corrected"].steps) == 2  # up to and including the person's step
    assert loaded["corrected"].steps[1].expert == click
    with_judge = {t.goal for t in load([source.model_copy(update={"trust_judge": True})])}
    assert with_judge == {"good", "corrected", "judged"}
    # The nightly job's curation draws the same line.
    from train.curation import curate

    curated = curate(store.iter_all(), tmp_path / "curated")
    assert {e.goal for e in curated.train + curated.holdout} == {"good", "corrected"}


def test_the_split_is_by_trajectory_and_stable_and_the_manifest_pins_it() -> None:
    trajectories = load(
        [SimSource(tasks=["wifi_on", "wifi_off", "bluetooth_on", "bluetooth_off", "dark_theme_on"])]
    )
    train, val = split(trajectories, 0.4, seed=1)
    assert len(train) + len(val) == 5
    assert {t.id for t in train}.isdisjoint({t.id for t in val})
    again_train, _ = split(list(reversed(trajectories)), 0.4, seed=1)
    assert {t.id for t in again_train} == {t.id for t in train}
    source = SimSource(tasks=["wifi_on"])
    body = manifest([source], train, val)
    assert body["counts"]["train"] == len(train)
    assert body["sha256"] == manifest([source], train, val)["sha256"]
    assert body["sha256"] != manifest([source], val, train)["sha256"]


def _write_lines(path: Path, *episodes: dict) -> Path:  # type: ignore[type-arg]
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes), encoding="utf-8")
    return path


def _step(action: dict, **extra: object) -> dict:  # type: ignore[type-arg]
    return {"screenshot": "missing.png", "action_content": action, **extra}


CLICK = {"action": "click", "coordinate": [100, 200]}
SWIPE_UP_FINGER = {"action": "swipe", "coordinate": [540, 1800], "coordinate2": [540, 600]}


def test_a_label_no_policy_could_write_leaves_its_trajectory_out_and_the_manifest_names_it(
    tmp_path: Path,
) -> None:
    from train.data import LoadReport

    path = _write_lines(
        tmp_path / "data.jsonl",
        {"goal": "good", "steps": [_step(CLICK), _step({"action": "terminate"})]},  # statusless: fine
        {"goal": "bad", "steps": [_step(CLICK), _step({"action": "open", "text": ""})]},
    )
    report = LoadReport()
    loaded = load([InterchangeSource(path=path, stand_ins=True)], report)
    assert [t.goal for t in loaded] == ["good"]
    (rejected,) = report.rejected
    assert rejected["goal"] == "bad"
    assert rejected["step"] == 1
    assert rejected["source"].endswith("#1")
    assert rejected["reason"].startswith("open: text")
    checks = manifest([], loaded, [], report)["checks"]
    assert checks["rejected"] == 1
    assert checks["rejected_trajectories"] == [rejected]


def test_swipe_conventions_are_per_dataset_and_contradictions_are_counted(tmp_path: Path) -> None:
    """AndroidControl-style files store scroll directions; this project's exports say "finger"."""
    from train.data import LoadReport

    scroll = {
        "goal": "scroll",
        "steps": [_step(SWIPE_UP_FINGER, check_options={"action": "swipe", "direction": "down"})],
    }
    finger = {**scroll, "goal": "finger", "swipe_convention": "finger"}
    path = _write_lines(tmp_path / "data.jsonl", scroll, finger)
    report = LoadReport()
    by_goal = {t.goal: t for t in load([InterchangeSource(path=path, stand_ins=True)], report)}
    assert by_goal["scroll"].swipe_convention == "scroll"
    assert by_goal["scroll"].steps[0].expected().finger_direction() == "up"
    # Read as finger motion, "down" contradicts the coordinates (which go up): counted, and the
    # stored direction is the label that matching and patches use.
    assert by_goal["finger"].swipe_convention == "finger"
    assert by_goal["finger"].steps[0].expected().finger_direction() == "down"
    assert report.swipe_contradictions == [
        {"source": by_goal["finger"].source, "step": 0, "stored": "down", "convention": "finger"}
    ]
    # A source may say what its files mean, whatever the lines say.
    forced = load([InterchangeSource(path=path, stand_ins=True, swipe_convention="scroll")])
    assert {t.steps[0].expected().finger_direction() for t in forced} == {"up"}
    body = manifest([], list(by_goal.values()), [], report)
    assert body["swipe_conventions"] == {"scroll": 1, "finger": 1}
    assert body["checks"]["swipe_contradictions"] == 1


def test_stand_in_frames_take_each_episodes_own_screen(tmp_path: Path) -> None:
    from agent.geometry import Size

    path = _write_lines(
        tmp_path / "data.jsonl",
        {"goal": "said", "screen": {"width": 720, "height": 1600}, "steps": [_step(CLICK)]},
        {"goal": "small", "steps": [_step(CLICK)]},
        {"goal": "wide", "steps": [_step(CLICK), _step({"action": "click", "coordinate": [1300.5, 2000]})]},
        {"goal": "tall", "steps": [_step({"action": "click", "coordinate": [500, 3150]})]},
        {"goal": "none", "steps": [_step({"action": "system_button", "button": "Back"})]},
    )
    sizes = {t.goal: {s.size for s in t.steps} for t in load([InterchangeSource(path=path, stand_ins=True)])}
    assert sizes == {
        "said": {Size(720, 1600)},
        "small": {Size(1080, 2400)},
        "wide": {Size(1440, 3120)},
        "tall": {Size(1440, 3200)},
        "none": {Size(1080, 2400)},
    }
    loaded = load([InterchangeSource(path=path, stand_ins=True)])
    assert loaded[2].steps[1].screenshot().open().size == (1440, 3120)


def test_every_expert_step_of_the_sop_file_read_without_images_patches_in_as_a_match(
    interchange_dir: Path,
) -> None:
    """The released SOP test set, loaded as training and evaluation load it: each expert action,
    injected as a patch (resized, rounded, clamped), fully matches its own step. 21 of its episodes
    tap past 1080x2400; with that one size for all, a patch is clamped off its target (PG 0.993)."""
    from agent.geometry import smart_resize
    from train.data import LoadReport
    from train.matching import match
    from train.rollout import step_action

    report = LoadReport()
    loaded = load(
        [InterchangeSource(path=interchange_dir / "android_control_evaluation_std.jsonl", stand_ins=True)],
        report,
    )
    assert len(loaded) == 1540  # 3 of its 1,543 lines repeat another line's trajectory
    assert report.rejected == []
    assert report.swipe_contradictions == []
    progress, success = [], []
    for trajectory in loaded:
        resized = smart_resize(trajectory.steps[0].size)
        matched = 0
        for step in trajectory.steps:
            if not match(step_action(step, resized), resized, step.expected()).full_match:
                break
            matched += 1
        progress.append(matched / len(trajectory.steps))
        success.append(matched == len(trajectory.steps))
    assert sum(progress) / len(progress) == 1.0
    assert all(success)
    assert sum(t.steps[0].size != (1080, 2400) for t in loaded) == 21


def test_simulated_experts_record_the_display_profile_they_ran_on() -> None:
    standard = load([SimSource(tasks=["add_to_cart"], seeds=[1])])
    learnable = load([SimSource(tasks=["add_to_cart"], seeds=[1], display="learnable")])
    assert standard[0].goal == learnable[0].goal
    assert standard[0].steps[0].size == learnable[0].steps[0].size  # the same screen, drawn larger
    assert standard[0].steps[1].sha256 != learnable[0].steps[1].sha256
    assert standard[0].id != learnable[0].id
