"""The model registry's states, lineage and history, and the job table with its lock, on both databases."""

from __future__ import annotations

import time

import pytest

from agent.jobs import JobStatus, JobStore, LockHeld
from agent.registry import CANARY_ALIAS, ModelRegistry, RegistryError, State


@pytest.fixture
def registry(store):  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    with store.engine.begin() as conn:  # the PostgreSQL database is shared by the session's tests
        for table in ("model_events", "model_aliases", "model_versions", "job_locks", "jobs"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    return ModelRegistry(store.engine)


def test_versions_are_immutable_with_lineage_and_an_adapter_needs_its_base(registry: ModelRegistry) -> None:
    base = registry.register("ui-s1-7b", base="/models/ui-s1-7b", kind="base", actor="cli:ops")
    assert (base.kind, base.state, base.weights) == ("base", State.CANDIDATE, "/models/ui-s1-7b")
    adapter = registry.register("rt-1", base="/models/ui-s1-7b", adapter="/runs/1/step-10", parent="ui-s1-7b")
    assert (adapter.kind, adapter.weights, adapter.served_name) == ("adapter", "/runs/1/step-10", "rt-1")
    with pytest.raises(RegistryError, match="immutable"):
        registry.register("rt-1", base="/elsewhere")
    with pytest.raises(RegistryError, match="parent version 'nope'"):
        registry.register("rt-2", base="/b", parent="nope")
    with pytest.raises(RegistryError, match="needs both"):
        registry.register("rt-3", adapter="/a", kind="adapter")


def test_promote_retires_the_replaced_version_and_rollback_rejects_the_new_one(
    registry: ModelRegistry,
) -> None:
    registry.register("v1", base="/m/1")
    registry.register("v2", base="/m/2", parent="v1")
    assert registry.promote("v1", actor="cli:ops") is None
    assert registry.promote("v2", actor="scheduler", detail={"gate": "passed"}) == "v1"
    assert {v.name: v.state for v in registry.versions()} == {"v1": "retired", "v2": "promoted"}
    assert registry.promoted().name == "v2"  # type: ignore[union-attr]
    assert registry.rollback(actor="key:abc", detail={"reason": "canary failed"}) == "v1"
    assert {v.name: v.state for v in registry.versions()} == {"v1": "promoted", "v2": "rejected"}
    history = [(e.event, e.actor) for e in reversed(registry.events("v2"))]
    assert history == [
        ("registered", "system"),
        ("alias:default", "scheduler"),
        ("promoted", "scheduler"),
        ("rolled_back", "key:abc"),
    ]
    assert registry.events("v2")[0].detail == {"reason": "canary failed", "restored": "v1"}
    with pytest.raises(RegistryError, match="rolled_back: canary failed"):
        registry.promote("v2", actor="cli:ops")
    assert registry.promote("v2", actor="cli:ops", force=True) == "v1"
    with pytest.raises(RegistryError, match="default version"):
        registry.reject("v2", actor="gate")


def test_the_canary_alias_moves_without_changing_states(registry: ModelRegistry) -> None:
    registry.register("v1", base="/m/1")
    registry.register("v2", base="/m/2")
    registry.promote("v1", actor="a")
    registry.promote("v2", actor="a", alias=CANARY_ALIAS)
    assert registry.aliases() == {"default": "v1", "canary": "v2"}
    assert {v.name: v.state for v in registry.versions()} == {"v1": "promoted", "v2": "candidate"}
    assert registry.resolve("canary").name == "v2"  # type: ignore[union-attr]


def test_annotations_add_measurements_without_touching_the_weights(registry: ModelRegistry) -> None:
    registry.register("v1", base="/m/1", info={"job": "j1"})
    updated = registry.annotate("v1", "evaluations", {"abc": {"sop": {"pg": 0.5}}}, actor="retrain")
    assert updated.info == {"job": "j1", "evaluations": {"abc": {"sop": {"pg": 0.5}}}}
    assert updated.base == "/m/1"
    assert registry.events("v1")[0].event == "annotated:evaluations"


def test_one_job_per_schedule_slot(registry: ModelRegistry) -> None:
    jobs = JobStore(registry.engine)
    first = jobs.create("retrain", trigger="schedule", slot="2026-12-03T02:00")
    assert first is not None
    assert jobs.create("retrain", trigger="schedule", slot="2026-12-03T02:00") is None  # another replica won
    assert jobs.create("retrain", trigger="cli") is not None  # unscheduled jobs have no slot
    assert [j.trigger for j in jobs.list("retrain")] == ["cli", "schedule"]
    running = jobs.update(first.id, status=JobStatus.RUNNING, detail={"stage": "curate"})
    assert running.started_at is not None
    assert running.finished_at is None
    done = jobs.update(first.id, status=JobStatus.SUCCEEDED, reason="ok", detail={"candidate": "v9"})
    assert done.detail == {"stage": "curate", "candidate": "v9"}
    assert done.finished_at is not None
    assert jobs.last("retrain", "succeeded").id == first.id  # type: ignore[union-attr]


def test_the_lock_admits_one_job_and_a_dead_holder_is_taken_over(registry: ModelRegistry) -> None:
    jobs = JobStore(registry.engine)
    a = jobs.create("retrain", trigger="cli")
    b = jobs.create("retrain", trigger="cli")
    assert a is not None
    assert b is not None
    jobs.update(a.id, status=JobStatus.RUNNING)
    assert jobs.acquire("retrain", a.id, ttl_s=600, owner="host-a") is None
    assert jobs.acquire("retrain", a.id, ttl_s=600, owner="host-a") is None  # re-entrant for its holder
    with pytest.raises(LockHeld, match=f"job {a.id} \\(host-a\\) holds the retrain lock"):
        jobs.acquire("retrain", b.id, ttl_s=60)
    jobs.renew("retrain", a.id, ttl_s=0.2)  # host-a's last renewal: then it died
    time.sleep(0.4)
    abandoned = jobs.acquire("retrain", b.id, ttl_s=60, owner="host-b")
    assert abandoned is not None
    assert abandoned.id == a.id
    assert abandoned.status == JobStatus.FAILED
    assert "abandoned" in (abandoned.reason or "")
    with pytest.raises(Exception, match="lost the retrain lock"):
        jobs.renew("retrain", a.id, ttl_s=60)
    jobs.release("retrain", b.id)
    assert jobs.acquire("retrain", a.id, ttl_s=60) is None  # free again
