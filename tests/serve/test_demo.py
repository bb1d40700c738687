from __future__ import annotations

from pathlib import Path

import pytest

from serve.demo.tour import run_demo

pytestmark = pytest.mark.timeout(180)


def test_the_demo_runs_its_tasks_to_success_with_the_expert_policy(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    failures = run_demo("expert", phones=2, data_dir=tmp_path)
    out = capsys.readouterr().out
    assert failures == 0
    assert "policy: the simulated tasks' expert solvers" in out
    assert "4/4 tasks done" in out
    assert (tmp_path / "trajectories.db").is_file()
    assert any((tmp_path / "screenshots").rglob("*.png"))
    # Each task's check on the phone is stored as a trusted label, so the traffic is training data.
    from agent.store import TrajectoryStore
    from train.curation import CurationSettings, curate

    store = TrajectoryStore(f"sqlite:///{tmp_path / 'trajectories.db'}", tmp_path / "screenshots")
    episodes = list(store.iter_all())
    assert {(e.is_successful, e.labels.get("label_source")) for e in episodes} == {(True, "checker")}
    curated = curate(episodes, tmp_path / "curated", CurationSettings(holdout_fraction=0.0))
    assert len(curated.train) == 4
    store.engine.dispose()


def test_the_demo_says_plainly_that_the_tiny_model_cannot_do_tasks(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    failures = run_demo("tiny", phones=1, data_dir=tmp_path)
    out = capsys.readouterr().out
    assert "random weights: every task will fail" in out
    assert failures == 2
    assert "unparseable response" in out


def test_the_starter_builds_in_a_cache_folder_given_relative(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """UIS1_CACHE_DIR=cache (or a benchmark's --cache .cache/x) works: the training config it writes
    names the model by a path that resolves wherever the config file lies."""
    pytest.importorskip("torch")
    from serve.demo.loop import LoopSetting, ensure_starter

    monkeypatch.chdir(tmp_path)
    setting = LoopSetting(known=("wifi_on",), new=(), starter_instances=1, starter_steps=1)
    starter = ensure_starter(setting, Path("cache"), quiet=True)
    assert starter.is_absolute()
    assert (starter / "config.json").is_file()
    assert starter.parent == tmp_path / "cache"
