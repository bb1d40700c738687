from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agent.actions import Click
from agent.interchange import load_jsonl
from agent.store import EpisodeQuery, TrajectoryStore
from agent.trajectory import DeviceRef, Episode, EpisodeStatus, Step, utcnow

GOLDEN = Path(__file__).parent / "golden" / "interchange.jsonl"


def _episode(
    store: TrajectoryStore,
    *,
    serial: str = "s1",
    version: str = "v1",
    status=EpisodeStatus.SUCCEEDED,
    png: bytes = b"\x89PNG fake-1",
    age_days: float = 0,
    labels=None,
) -> Episode:  # type: ignore[no-untyped-def]
    ref = store.screenshots.put(png, 1080, 2400)
    step = Step(
        index=0,
        screenshot=ref,
        raw_response="r",
        action=Click(coordinate=(1, 2)),
        device_action=Click(coordinate=(1, 2)),
        model_version=version,
    )
    episode = Episode(
        goal=f"goal {serial} {version}",
        device=DeviceRef(serial=serial),
        model_version=version,
        status=status,
        created_at=utcnow() - timedelta(days=age_days),
        labels=labels or {},
        steps=[step],
    )
    store.save(episode)
    return episode


def test_migrations_are_idempotent_and_episodes_round_trip(store: TrajectoryStore) -> None:
    store.migrate()
    for episode in load_jsonl(GOLDEN):
        store.save(episode)
        assert store.get(episode.id) == episode


def test_steps_are_updated_in_place(store: TrajectoryStore) -> None:
    episode = _episode(store)
    step = episode.steps[0].model_copy(update={"error": "device gone"})
    store.save_step(episode.id, step)
    assert store.get(episode.id).steps == [step]


def test_queries_filter_by_status_device_model_label_and_time(store: TrajectoryStore) -> None:
    a = _episode(store, serial="s1", version="v1", labels={"feedback": "good"})
    b = _episode(store, serial="s2", version="v2", status=EpisodeStatus.FAILED, age_days=3)
    assert {e.id for e in store.query()} == {a.id, b.id}
    assert [e.id for e in store.query(EpisodeQuery(status=EpisodeStatus.FAILED))] == [b.id]
    assert [e.id for e in store.query(EpisodeQuery(device_serial="s1"))] == [a.id]
    assert [e.id for e in store.query(EpisodeQuery(model_version="v2"))] == [b.id]
    assert [e.id for e in store.query(EpisodeQuery(label=("feedback", "good")))] == [a.id]
    assert [e.id for e in store.query(EpisodeQuery(since=utcnow() - timedelta(days=1)))] == [a.id]
    assert [e.id for e in store.query(EpisodeQuery(limit=1))] == [a.id]  # newest first


def test_screenshots_are_content_addressed_and_deduplicated(store: TrajectoryStore) -> None:
    first = store.screenshots.put(b"same bytes")
    second = store.screenshots.put(b"same bytes")
    assert first == second
    assert len(list(store.screenshots.root.rglob("*.png"))) == 1
    assert store.screenshots.get(first) == b"same bytes"


def test_retention_drops_old_screenshots_but_keeps_rows_and_shared_files(store: TrajectoryStore) -> None:
    old = _episode(store, png=b"old only", age_days=40)
    shared_old = _episode(store, png=b"shared", age_days=40)
    _episode(store, png=b"shared", age_days=1)
    assert store.drop_screenshots_older_than(30) == 1
    assert not store.screenshots.path(old.steps[0].screenshot.sha256 or "").exists()
    assert store.screenshots.path(shared_old.steps[0].screenshot.sha256 or "").exists()
    assert store.get(old.id).steps[0].raw_response == "r"


def test_deleting_an_episode_removes_its_rows_and_own_screenshots_and_records_who(
    store: TrajectoryStore,
) -> None:
    gone = _episode(store, png=b"only mine", labels={"feedback": "success"})
    shared = _episode(store, png=b"shared screen")
    other = _episode(store, png=b"shared screen", serial="s2")
    assert store.delete_episode(gone.id, by="key alice (k1)", reason="asked to") is True
    assert store.delete_episode(shared.id, by="key alice (k1)") is True
    with pytest.raises(KeyError):
        store.get(gone.id)
    assert {e.id for e in store.iter_all()} == {other.id}
    assert store.query(EpisodeQuery(label=("feedback", "success"))) == []
    assert not store.screenshots.path(gone.steps[0].screenshot.sha256 or "").exists()
    assert store.screenshots.path(other.steps[0].screenshot.sha256 or "").exists()  # still shown by another
    assert store.delete_episode(gone.id, by="again") is False
    store.save_episode(gone)  # a late write (feedback, the judge) does not bring it back
    with pytest.raises(KeyError):
        store.get(gone.id)
    record = {d.episode_id: d for d in store.deletions()}
    assert set(record) == {gone.id, shared.id}
    assert (record[gone.id].deleted_by, record[gone.id].reason) == ("key alice (k1)", "asked to")


def test_episode_retention_deletes_finished_episodes_past_it_and_nothing_else(store: TrajectoryStore) -> None:
    old = _episode(store, age_days=40)
    running = _episode(store, age_days=40, status=EpisodeStatus.RUNNING)
    recent = _episode(store, age_days=1)
    assert store.delete_episodes_older_than(30) == 1
    assert {e.id for e in store.iter_all()} == {running.id, recent.id}
    (deletion,) = store.deletions()
    assert (deletion.episode_id, deletion.deleted_by) == (old.id, "retention")
    assert deletion.reason == "older than the episode retention of 30 days"


def test_export_with_images_reimports_identically(store: TrajectoryStore, tmp_path: Path) -> None:
    _episode(store, png=b"\x89PNG one")
    out = store.export_jsonl(store.iter_all(), tmp_path / "export1")
    assert len(list((tmp_path / "export1" / "images").iterdir())) == 1
    other = TrajectoryStore(f"sqlite:///{tmp_path / 'other.db'}", tmp_path / "other-shots")
    other.migrate()
    imported = other.import_jsonl(out)
    assert other.screenshots.get(imported[0].steps[0].screenshot) == b"\x89PNG one"
    again = other.export_jsonl(other.iter_all(), tmp_path / "export2")
    assert again.read_text() == out.read_text()
    assert (tmp_path / "export2" / "images").iterdir().__next__().read_bytes() == b"\x89PNG one"


def test_an_episode_is_found_by_the_start_of_its_id(store: TrajectoryStore) -> None:
    first = Episode(id="abc12345-one", goal="one")
    second = Episode(id="abc12399-two", goal="two")
    odd = Episode(id="x_y%z", goal="three")
    for episode in (first, second, odd):
        store.save_episode(episode)
    assert store.resolve_id("abc12345") == first.id
    assert store.resolve_id(second.id) == second.id
    with pytest.raises(LookupError, match="2 episodes start with 'abc123'"):
        store.resolve_id("abc123")
    with pytest.raises(KeyError):
        store.resolve_id("nope")
    with pytest.raises(KeyError):
        store.resolve_id("x%")  # wildcards in the prefix are matched literally
    assert store.resolve_id("x_y") == odd.id
