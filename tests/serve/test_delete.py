"""Deleting a task: who may, what goes (rows, screenshots, exports, the next curation), what stays
(a record of the deletion); and the episode retention the service sweeps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.settings import StoreSettings
from agent.store import TrajectoryStore, make_engine
from serve.api.auth import KeyStore, Scope
from tests.serve.test_api import _held, wait_finished

pytestmark = pytest.mark.timeout(180)


def test_a_task_is_deleted_by_its_key_or_an_admin_and_leaves_only_a_record(
    make_service, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    owner = service.client(service.agent)
    engine = make_engine(service.settings.store.url)
    other_key = KeyStore(engine).create("someone-else", {Scope.AGENT})[1]
    engine.dispose()
    other = service.client(other_key)
    admin = service.client(service.admin)
    store = TrajectoryStore(service.settings.store.url, service.settings.store.screenshot_dir)

    mine = owner.post("/v1/tasks", json={"goal": "mine #steps=2"}).json()["id"]
    kept = owner.post("/v1/tasks", json={"goal": "kept #steps=2"}).json()["id"]
    for task_id in (mine, kept):
        assert wait_finished(owner, task_id)["status"] == "succeeded"
        assert owner.post(f"/v1/tasks/{task_id}/feedback", json={"outcome": "success"}).status_code == 200

    refused = other.delete(f"/v1/tasks/{mine}")
    assert refused.status_code == 403
    assert "the key that submitted" in refused.json()["detail"]
    held = owner.post("/v1/tasks", json={"goal": "held", "approval": {"every_step": True}}).json()["id"]
    _held(owner, held, 0)
    assert owner.delete(f"/v1/tasks/{held}").status_code == 409  # running: cancel it first
    assert owner.post(f"/v1/tasks/{held}/cancel").status_code == 200

    assert owner.delete(f"/v1/tasks/{mine}", params={"reason": "the user asked"}).status_code == 204
    assert owner.get(f"/v1/tasks/{mine}").status_code == 404
    assert owner.get(f"/v1/trajectories/{mine}").status_code == 404
    assert owner.delete(f"/v1/tasks/{mine}").status_code == 404
    exported = owner.get("/v1/trajectories/export").text
    assert "mine #steps=2" not in exported
    assert "kept #steps=2" in exported
    from train.curation import curate

    curated = curate(store.iter_all(), tmp_path / "curated")
    assert [e.goal for e in curated.train + curated.holdout] == ["kept #steps=2"]
    assert admin.delete(f"/v1/tasks/{held}").status_code == 204  # an admin deletes any task

    (newest, first) = store.deletions()[:2]
    assert {newest.episode_id, first.episode_id} == {mine, held}
    by_owner = newest if newest.episode_id == mine else first
    assert by_owner.deleted_by.startswith("key agent (")
    assert by_owner.reason == "the user asked"

    # The command line reads the same record, and deletes the same way.
    from agent.cli import trajectories_app as app

    monkeypatch.setenv("UIS1_STORE__URL", service.settings.store.url)
    monkeypatch.setenv("UIS1_STORE__SCREENSHOT_DIR", str(service.settings.store.screenshot_dir))
    runner = CliRunner()
    listed = runner.invoke(app, ["deletions", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {d["id"] for d in json.loads(listed.output)} == {mine, held}
    deleted = runner.invoke(app, ["delete", kept[:8], "--reason", "cleanup", "--by", "ops"])
    assert deleted.exit_code == 0, deleted.output
    assert owner.get(f"/v1/tasks/{kept}").status_code == 404
    assert store.deletions()[0].deleted_by == "ops"
    missing = runner.invoke(app, ["delete", "nope"])
    assert missing.exit_code == 1
    assert "no episode nope" in missing.output


def test_the_retention_sweep_deletes_old_episodes_and_screenshots_when_set(tmp_path: Path) -> None:
    from datetime import timedelta

    from agent.actions import Click
    from agent.trajectory import Episode, EpisodeStatus, Step, utcnow
    from serve.ops import retention

    settings = StoreSettings(url=f"sqlite:///{tmp_path / 't.db'}", screenshot_dir=tmp_path / "shots")
    store = TrajectoryStore(settings.url, settings.screenshot_dir)
    store.migrate()

    def episode(age_days: float, png: bytes) -> Episode:
        step = Step(
            index=0, screenshot=store.screenshots.put(png, 10, 10), device_action=Click(coordinate=(1, 1))
        )
        made = Episode(
            goal="g",
            status=EpisodeStatus.SUCCEEDED,
            is_successful=True,
            labels={"label_source": "checker", "feedback": "success"},
            created_at=utcnow() - timedelta(days=age_days),
            steps=[step],
        )
        store.save(made)
        return made

    old, recent = episode(40, b"old"), episode(2, b"recent")
    assert not retention.enabled(settings)
    assert retention.sweep(store, settings) == (0, 0)  # off by default: nothing goes
    assert len(list(store.iter_all())) == 2
    week = settings.model_copy(update={"episode_retention_days": 7})
    assert retention.enabled(week)
    assert retention.sweep(store, week) == (1, 0)
    assert [e.id for e in store.iter_all()] == [recent.id]
    assert not store.screenshots.path(old.steps[0].screenshot.sha256 or "").exists()
    assert store.deletions()[0].deleted_by == "retention"
    day = settings.model_copy(update={"screenshot_retention_days": 1})
    assert retention.sweep(store, day) == (0, 1)
    assert store.get(recent.id).steps  # the rows stay; only the file went
    from train.curation import curate

    # The nightly job's curation does not trip on it.
    curated = curate(store.iter_all(), tmp_path / "curated", screenshot_dir=settings.screenshot_dir)
    assert curated.train + curated.holdout == []
    assert curated.manifest["dropped"] == {"screenshots deleted": 1}

    async def one_sweep() -> None:  # the service's loop sweeps at once, then waits
        task = asyncio.create_task(retention.sweep_forever(store, week, every_s=3600))
        await asyncio.sleep(0.5)
        task.cancel()

    episode(40, b"old again")
    asyncio.run(one_sweep())
    assert [e.id for e in store.iter_all()] == [recent.id]
