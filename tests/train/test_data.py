"""Expert data sources: the simulated experts, interchange files, the trajectory store; split and manifest."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from PIL import Image

from agent.store import TrajectoryStore
from agent.trajectory import ActionLabel, Episode, ScreenshotRef, Step, StepSource
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
    loaded = load([InterchangeSource(path=path, stand_in_size=(1080, 2400))])
    assert len(loaded) == 32
    assert sum(len(t.steps) for t in loaded) == 206


def test_interchange_images_are_read_beside_the_file(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (540, 1200), (1, 2, 3)).save(buffer, "PNG")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(buffer.getvalue())
    record = {"goal": "g", "is_successful": True, "steps": [
        {"screenshot": "images/a.png", "action_content": {"action": "click", "coordinate": [10, 20]}}]}  # fmt: skip
    (tmp_path / "data.jsonl").write_text(json.dumps(record) + "\n")
    (trajectory,) = load([InterchangeSource(path=tmp_path / "data.jsonl")])
    assert trajectory.steps[0].size == (540, 1200)
    assert trajectory.steps[0].screenshot().data == buffer.getvalue()


def _png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (100, 200), (shade, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


def test_the_store_gives_successful_episodes_and_corrected_prefixes_only(tmp_path: Path) -> None:
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "shots")
    store.migrate()
    click = ActionLabel(action="click", coordinate=(5, 5))

    def step(i: int, source: StepSource = StepSource.POLICY) -> Step:
        ref = store.screenshots.put(_png(i * 10), 100, 200)
        from agent.actions import action_from_dict

        return Step(index=i, screenshot=ScreenshotRef(uri=ref.uri, sha256=ref.sha256), source=source,
                    device_action=action_from_dict({"action": "click", "coordinate": [5, 5 + i]}),
                    expert=click if source is StepSource.HUMAN else None)  # fmt: skip

    store.save(Episode(goal="good", is_successful=True, steps=[step(0), step(1)]))
    store.save(
        Episode(goal="corrected", is_successful=False, steps=[step(0), step(1, StepSource.HUMAN), step(2)])
    )
    store.save(Episode(goal="failed", is_successful=False, steps=[step(0)]))
    store.save(Episode(goal="unlabelled", steps=[step(0)]))
    loaded = {t.goal: t for t in load([StoreSource(url=store.url, screenshot_dir=tmp_path / "shots")])}
    assert set(loaded) == {"good", "corrected"}
    assert len(loaded["good"].steps) == 2
    assert len(loaded["corrected"].steps) == 2  # up to and including the person's step
    assert loaded["corrected"].steps[1].expert == click


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
