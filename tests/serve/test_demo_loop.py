"""The loop demo end to end on a small setting: a starter that fails a task, a person's correction
through the takeover API, the retraining job, the gate, the hot swap, and the task done after."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(1500)


@pytest.mark.slow
def test_the_loop_demo_turns_a_corrected_failure_into_a_success(tmp_path: Path) -> None:
    from agent.store import EpisodeQuery, TrajectoryStore
    from agent.trajectory import StepSource
    from serve.demo.loop import LoopSetting, run_loop

    setting = LoopSetting(
        known=("wifi_on",),
        new=("bluetooth_on",),
        starter_instances=8,
        starter_steps=200,
        held_out_instances=1,
        gate_instances=2,
        retrain_steps=100,
    )
    result = run_loop(setting, data_dir=tmp_path / "demo", cache=tmp_path / "cache", quiet=True)

    # The held-out rows it reports are instances unlike any it trained on, and it says how they differ.
    from devices.sim.tasks import splits

    held = [r for r in result.rows if r.held_out]
    assert {r.family for r in held} == set(setting.families)
    for row in held:
        trained = {setting.demo_seed(row.family)}
        if row.family in setting.known:
            trained |= set(setting.starter_seeds(row.family))
        assert splits.signature(row.family, row.seed) not in {
            splits.signature(row.family, s) for s in trained
        }
    assert set(result.varies) == set(setting.families)

    corrected = [r for r in result.rows if r.corrected]
    # The starter fails the task it never saw (and may fail a known task's new instance: the rows move).
    assert "bluetooth_on" in [r.family for r in corrected], result.rows
    assert result.corrected_steps >= 1
    assert result.promoted is not None, result.gate
    assert sum(bool(r.after) for r in corrected) > sum(bool(r.before) for r in corrected), result.rows
    # The swap happened under load, and no request failed: the stream saw both versions answer.
    assert result.failed_requests == []
    assert result.requests_during_swap > 0
    assert set(result.answered_by) == {"starter", result.promoted}, result.answered_by

    # Every step of every episode is in the store, with the version that took it.
    store = TrajectoryStore(
        f"sqlite:///{tmp_path / 'demo' / 'trajectories.db'}", tmp_path / "demo" / "screenshots"
    )
    episodes = [store.get(e.id) for e in store.query(EpisodeQuery(limit=1000))]
    assert len(episodes) == 2 * len(result.rows) + len(corrected)  # before, after, and the corrections
    versions = {e.model_version for e in episodes}
    assert versions == {"starter", result.promoted}
    for episode in episodes:
        assert episode.steps, episode.id
        assert [s.index for s in episode.steps] == list(range(len(episode.steps)))
        assert {s.model_version for s in episode.steps} == {episode.model_version}
    human = [s for e in episodes for s in e.steps if s.source is StepSource.HUMAN]
    assert len(human) == result.corrected_steps
