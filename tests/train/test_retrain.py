"""``uis1 retrain`` on PostgreSQL: episodes recorded on simulated phones and labelled by their task
checks are curated, the policy is trained from the promoted version, both versions are evaluated
on the same held-out data and simulated tasks, and a candidate is registered; a job without enough
new data, or one that finds another holding the lock, is skipped with its reason; a killed job is
taken over and resumed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.progress import wait_while_working
from tests.train.conftest import RESIZE, clean_env, write_config

pytestmark = pytest.mark.timeout(900)

# Goals on both sides of the held-out split (it is a pure function of the goal text).
RECORDED = [
    ("wifi_on", 0),
    ("bluetooth_on", 0),
    ("airplane_mode_on", 0),
    ("dark_theme_on", 0),
    ("wifi_off", 0),
    ("bluetooth_off", 0),
]


def record(store: Any, fleet: Any, sim: Any, tasks: list[tuple[str, int]]) -> list[str]:
    """Run each task's expert on the simulated phone through the episode loop; label it by its check."""
    from agent.devkit.expert_policy import ExpertPolicy
    from agent.episode import EpisodeRunner, EpisodeSettings
    from devices.adb import AdbDriver, DriverSettings
    from devices.sim.tasks import TASKS, Outcome

    driver = AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))
    ids = []
    for name, seed in tasks:
        task = TASKS[name].create(seed)
        task.initialize(sim.phone)
        runner = EpisodeRunner(ExpertPolicy(task, sim.phone), driver, store, EpisodeSettings(settle_s=0.0))
        episode = asyncio.run(runner.run(task.goal))
        ok = task.is_successful(sim.phone, Outcome(answer=episode.answer))
        labels = {**episode.labels, "feedback": "success" if ok else "failure", "label_source": "checker"}
        store.save_episode(episode.model_copy(update={"is_successful": ok, "labels": labels}))
        ids.append(episode.id)
    return ids


def retrain_body(url: str, root: Path, base: Path, **overrides: Any) -> dict[str, Any]:
    body = {
        "work_dir": str(root / "work"),
        "store": {"url": url, "screenshot_dir": str(root / "shots")},
        "base_model": str(base),
        "base_served_name": "sft-base",
        "version_prefix": "rt",
        "min_new_episodes": 3,
        "curation": {"holdout_fraction": 0.3},
        "stages": ["sft"],
        "resize": RESIZE,
        "sft": {"max_steps": 3, "batch_size": 4, "optim": {"lr": 1e-4}, "save_every": 1},
        "evaluation": {
            "max_new_tokens": 72,
            "online": {"tasks": ["wifi_on"], "max_steps": 3, "max_new_tokens": 72},
        },
        "lock_ttl_s": 30,
    }
    body.update(overrides)
    return body


def retrain_cli(config: Path, *extra: str) -> dict[str, Any]:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "uis1"), "retrain", "--config", str(config), "--quiet", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    out["returncode"] = result.returncode
    out["stderr"] = result.stderr
    return out


@pytest.fixture
def pg_store(fresh_postgres_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    from agent.store import TrajectoryStore

    store = TrajectoryStore(fresh_postgres_url, tmp_path / "shots")
    store.migrate()
    yield store
    store.engine.dispose()


def test_retrain_registers_an_evaluated_candidate_then_skips_without_new_data(
    pg_store: Any, fleet: Any, sim: Any, sft_checkpoint: Path, tmp_path: Path
) -> None:
    from agent.jobs import JobStore
    from agent.registry import ModelRegistry

    record(pg_store, fleet, sim, RECORDED)
    config = write_config(tmp_path / "retrain.yaml", retrain_body(pg_store.url, tmp_path, sft_checkpoint))
    done = retrain_cli(config)
    assert done["status"] == "succeeded", done["stderr"][-3000:]
    registry = ModelRegistry(pg_store.engine)
    candidate = registry.get(done["candidate"])
    assert candidate.state == "candidate"
    assert candidate.parent == "sft-base"
    assert candidate.kind == "full"
    assert registry.promoted().name == "sft-base"  # type: ignore[union-attr]  # the first run's starting point
    info = candidate.info
    manifest = info["data_manifest"]
    assert manifest["train"] + manifest["holdout"] == len(RECORDED)
    assert manifest["train"] > 0
    assert manifest["holdout"] > 0
    assert manifest["label_sources"] == {"checker": len(RECORDED)}
    assert info["training"]["sft"]["parent_version"] == "sft-base"
    evaluation = info["evaluation"]
    for side in (evaluation["candidate"], evaluation["baseline"]["scores"]):
        assert 0 <= side["sop"]["pg"] <= 1
        assert side["sop"]["trajectories"] == manifest["holdout"]
        assert side["online"]["episodes"] == 1
    assert evaluation["baseline"]["version"] == "sft-base"
    # The parent keeps its scores on this evaluation, so the next candidate is compared without re-running it.
    assert (
        registry.get("sft-base").info["evaluations"][evaluation["fingerprint"]]
        == evaluation["baseline"]["scores"]
    )
    checkpoint = Path(candidate.base or "")
    assert (checkpoint / "model.safetensors").is_file()
    assert json.loads((checkpoint / "run.json").read_text())["parent"] == "sft-base"
    # What a swap checks the engine against: the trained weights' answer to the probe, and the
    # parent's, so that an engine still serving the parent is told apart (agent.fingerprint).
    from agent import fingerprint

    trained = fingerprint.Fingerprint.of(info[fingerprint.INFO_KEY])
    parent = fingerprint.Fingerprint.of(registry.get("sft-base").info[fingerprint.INFO_KEY])
    assert trained is not None
    assert parent is not None
    assert fingerprint.distance(trained, fingerprint.of_weights(checkpoint)) < 1e-5
    assert fingerprint.distance(trained, parent) > fingerprint.DEFAULT_TOLERANCE

    again = retrain_cli(config)
    assert again["status"] == "skipped"
    assert "0 new trusted training episode(s) since the last run, 3 needed" in again["reason"]
    jobs = JobStore(pg_store.engine).list("retrain")
    assert [j.status for j in jobs] == ["skipped", "succeeded"]
    assert jobs[1].detail["candidate"] == candidate.name


def test_a_second_job_is_skipped_while_one_holds_the_lock(
    pg_store: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agent.jobs import JobStatus, JobStore

    jobs = JobStore(pg_store.engine)
    holder = jobs.create("retrain", trigger="schedule", slot="s1")
    assert holder is not None
    jobs.update(holder.id, status=JobStatus.RUNNING)
    jobs.acquire("retrain", holder.id, ttl_s=600, owner="other-node:42")
    config = write_config(tmp_path / "retrain.yaml", retrain_body(pg_store.url, tmp_path, tiny_model_dir))
    skipped = retrain_cli(config)
    assert skipped["status"] == "skipped"
    assert f"job {holder.id} (other-node:42) holds the retrain lock" in skipped["reason"]
    assert jobs.get(holder.id).status == "running"  # untouched


def test_a_killed_job_is_taken_over_and_resumed(
    pg_store: Any, fleet: Any, sim: Any, sft_checkpoint: Path, tmp_path: Path
) -> None:
    from agent.jobs import JobStore

    record(pg_store, fleet, sim, RECORDED)
    body = retrain_body(pg_store.url, tmp_path, sft_checkpoint, lock_ttl_s=3)
    body["sft"] = {**body["sft"], "max_steps": 6, "epochs": 20}
    config = write_config(tmp_path / "retrain.yaml", body)
    jobs = JobStore(pg_store.engine)
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "uis1"), "retrain", "--config", str(config), "--quiet"],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run_dir: Path | None = None

    def checkpointed() -> bool:
        nonlocal run_dir
        found = jobs.list("retrain")
        if found and found[0].detail.get("job_dir"):
            run_dir = Path(found[0].detail["job_dir"]) / "sft" / "checkpoints"
            return run_dir.is_dir() and any(not c.name.endswith(".tmp") for c in run_dir.glob("step-*"))
        return False

    try:  # killed once its first checkpoint exists, however long a busy machine takes (a hang fails)
        wait_while_working(proc, checkpointed)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (killed,) = jobs.list("retrain")
    assert killed.status == "running"  # nobody could mark it: the process was killed
    assert run_dir is not None
    first = {c.name: c.stat().st_mtime_ns for c in run_dir.glob("step-*") if not c.name.endswith(".tmp")}
    time.sleep(3.5)  # its lock lapses
    resumed = retrain_cli(config)
    assert resumed["status"] == "succeeded", resumed["stderr"][-3000:]
    after = {j.id: j for j in jobs.list("retrain")}
    assert after[killed.id].status == "failed"
    assert "abandoned" in (after[killed.id].reason or "")
    new = after[resumed["job"]]
    assert new.detail["resumed_from"] == killed.id
    assert new.detail["job_dir"] == killed.detail["job_dir"]
    metrics = [
        json.loads(line)
        for line in (Path(new.detail["job_dir"]) / "sft" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    # Continued, not restarted: the checkpoints written before the kill were not written again.
    assert {name: (run_dir / name).stat().st_mtime_ns for name in first} == first
    assert new.detail["candidate"].startswith("rt-")
