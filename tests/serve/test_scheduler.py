"""The cron schedule, the evaluation gate's decisions, and scheduled jobs started once across
replicas, run as child processes and recorded (a job process that dies is marked failed)."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.registry import ModelVersion
from serve.models.gate import GateSettings, decide
from serve.models.promotion import Promotion
from serve.ops.scheduler import Cron, CronError, Scheduler, SchedulerSettings


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 2 * * *", "2026-12-03T01:59:30", "2026-12-03T02:00"),
        ("0 2 * * *", "2026-12-03T02:00:00", "2026-12-04T02:00"),  # strictly after
        ("*/15 * * * *", "2026-12-03T10:07", "2026-12-03T10:15"),
        ("5,35 9-10 * * *", "2026-12-03T10:36", "2026-12-04T09:05"),
        ("0 0 * * 1-5", "2026-12-04T12:00", "2026-12-07T00:00"),  # Friday noon -> Monday
        ("0 0 * * 7", "2026-12-03T00:00", "2026-12-06T00:00"),  # 7 is Sunday too
        ("0 0 29 2 *", "2026-03-01T00:00", "2028-02-29T00:00"),
        ("0 12 1 * 3", "2026-12-01T13:00", "2026-12-02T12:00"),  # day of month OR Wednesday
        ("@hourly", "2026-12-03T10:30", "2026-12-03T11:00"),
        ("@nightly", "2026-12-03T10:30", "2026-12-04T02:00"),
        ("30 1 * * MON-FRI", "2026-12-05T00:00", "2026-12-07T01:30"),  # Saturday -> Monday
        ("0 0 1 JAN *", "2026-12-03T00:00", "2027-01-01T00:00"),
        ("@yearly", "2026-12-03T00:00", "2027-01-01T00:00"),
    ],
)
def test_next_fire_times(expression: str, after: str, expected: str) -> None:
    assert Cron(expression).next_after(at(after)) == at(expected)


@pytest.mark.parametrize(
    "bad", ["0 2 * *", "60 * * * *", "* 24 * * *", "*/0 * * * *", "a * * * *", "* * 32 * *", "0 0 * * FUN"]
)
def test_bad_expressions_are_refused_with_the_field(bad: str) -> None:
    with pytest.raises(CronError):
        Cron(bad)
    with pytest.raises(ValueError, match="cron"):
        SchedulerSettings(cron=bad)


def test_a_time_zone_shifts_the_schedule() -> None:
    scheduler = Scheduler(None, SchedulerSettings(cron="0 2 * * *", timezone="Asia/Tokyo"))  # type: ignore[arg-type]
    fire = scheduler.next_fire(at("2026-12-03T00:00"))
    assert fire.astimezone(UTC) == at("2026-12-03T17:00")  # 02:00 in Tokyo


def version(candidate: dict, baseline: dict | None) -> ModelVersion:  # type: ignore[type-arg]
    evaluation = (
        {"candidate": candidate, "baseline": {"version": "v1", "scores": baseline}} if baseline else None
    )
    return ModelVersion(
        "v2",
        "v2",
        "/m",
        None,
        "candidate",
        at("2026-12-03T00:00"),
        {"evaluation": evaluation} if evaluation else {},
    )


@pytest.mark.parametrize(
    ("candidate", "baseline", "passed", "phrase"),
    [
        (
            {"sop": {"score": 0.50, "tsr": 0.4}, "online": {"success_rate": 0.5}},
            {"sop": {"score": 0.51, "tsr": 0.4}, "online": {"success_rate": 0.5}},
            True,
            "within tolerance",
        ),
        (
            {"sop": {"score": 0.40, "tsr": 0.4}},
            {"sop": {"score": 0.50, "tsr": 0.4}},
            False,
            "sop.score fell from 0.5000 to 0.4000",
        ),
        (
            {"sop": None, "online": {"success_rate": 0.25}},
            {"sop": None, "online": {"success_rate": 0.5}},
            False,
            "online.success_rate fell",
        ),
        ({"sop": None, "online": None}, {"sop": None, "online": None}, False, "no metric was measured"),
        ({"sop": {"score": 0.5, "tsr": 0.5}}, None, False, "carries no evaluation"),
    ],
)
def test_the_gate_compares_each_measured_metric(
    candidate: dict,
    baseline: dict | None,
    passed: bool,  # type: ignore[type-arg]
    phrase: str,
) -> None:
    decision = decide(version(candidate, baseline))
    assert decision.passed is passed
    assert any(phrase in r for r in decision.reasons), decision.reasons


@pytest.mark.parametrize(
    ("tsr", "passed", "phrase"),
    [
        (0.30, False, "sop.tsr fell from 0.4000 to 0.3000 (tolerance 0.05)"),  # 0.10 below: beyond 0.05
        (0.36, True, "sop.tsr 0.4000 -> 0.3600: within tolerance 0.05"),
    ],
)
def test_the_gate_judges_task_success_on_its_own(tsr: float, passed: bool, phrase: str) -> None:
    """Every other metric is equal: the task success alone decides."""
    baseline = {"sop": {"score": 0.5, "tsr": 0.40}, "online": {"success_rate": 0.5}}
    candidate = {"sop": {"score": 0.5, "tsr": tsr}, "online": {"success_rate": 0.5}}
    decision = decide(version(candidate, baseline))
    assert decision.passed is passed
    assert phrase in decision.reasons
    assert [r for r in decision.reasons if "fell" in r] == ([] if passed else [phrase])


def test_the_gate_can_demand_an_improvement() -> None:
    same = {"sop": {"score": 0.5, "tsr": 0.5}}
    assert decide(version(same, same)).passed
    assert not decide(version(same, same), GateSettings(require_improvement=True)).passed


def test_each_fire_time_starts_one_job_across_schedulers_and_a_dead_job_is_marked_failed(
    store,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    import sqlalchemy as sa

    from agent.jobs import JobStore

    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM jobs"))
    jobs = JobStore(store.engine)
    config = tmp_path / "retrain.yaml"
    config.write_text("work_dir: x\n")
    # A "retrain" that dies at once without a word, as a process killed by the kernel would.
    dies = [sys.executable, "-c", "import sys; print('out of memory', file=sys.stderr); sys.exit(137)"]
    settings = SchedulerSettings(retrain_config=config, command=dies)
    ended = []

    async def remember(job) -> None:  # type: ignore[no-untyped-def]
        ended.append(job)

    async def both() -> None:
        one, two = (
            Scheduler(jobs, settings, on_job_end=remember),
            Scheduler(jobs, settings, on_job_end=remember),
        )
        fire = at("2026-12-03T02:00")
        started = [await one.fire(fire), await two.fire(fire)]
        assert sum(j is not None for j in started) == 1
        await asyncio.gather(*[t for s in (one, two) for t in s._running.values()])

    asyncio.run(both())
    (job,) = jobs.list("retrain")
    assert job.trigger == "schedule"
    assert job.slot == "2026-12-03T02:00+0000"
    assert job.status == "failed"
    assert job.reason == "exit status 137: out of memory"
    assert [j.id for j in ended] == [job.id]


def test_utc_needs_no_time_zone_database_and_an_unknown_zone_is_named() -> None:
    from serve.ops.scheduler import zone

    assert zone("UTC") is UTC
    assert zone("Etc/UTC") is UTC
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        SchedulerSettings(timezone="Mars/Olympus")


def _registry_with_a_candidate(store):  # type: ignore[no-untyped-def]
    """The store's registry emptied, with ``base`` and an evaluated candidate ``nightly-1`` of it."""
    import sqlalchemy as sa

    from agent.registry import ModelRegistry

    with store.engine.begin() as conn:  # the PostgreSQL database is shared by the session's tests
        for table in ("model_events", "model_aliases", "model_versions", "job_locks"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    registry = ModelRegistry(store.engine)
    scores = {"sop": {"score": 0.5, "tsr": 0.5}}
    registry.register("base", base="/m/base", kind="base")
    registry.register(
        "nightly-1",
        base="/m/1",
        parent="base",
        info={"evaluation": {"candidate": scores, "baseline": {"version": "base", "scores": scores}}},
    )
    return registry


def test_a_candidate_whose_swap_cannot_run_yet_stays_pending(store) -> None:  # type: ignore[no-untyped-def]
    """The gate passes, but another swap holds the lock: the candidate is neither promoted nor lost."""
    from agent.jobs import JobStore, LockHeld
    from agent.prompt import PromptSettings
    from agent.vllm_policy import VllmSettings
    from serve.models.swap import SWAP_LOCK, VllmSwapController

    registry = _registry_with_a_candidate(store)
    JobStore(store.engine).acquire(SWAP_LOCK, "someone-else", ttl_s=600)
    controller = VllmSwapController(
        store, registry, VllmSettings(base_url="http://127.0.0.1:9"), PromptSettings()
    )

    promotion = Promotion(controller)

    async def attempt() -> list[str]:
        with pytest.raises(LockHeld):
            await promotion.gate_and_promote("nightly-1")
        return await promotion.pending_candidates()

    assert asyncio.run(attempt()) == ["nightly-1"]
    version = registry.get("nightly-1")
    assert version.state == "candidate"
    assert version.info["gate"]["passed"] is True


def test_a_candidate_taken_by_two_replicas_watchers_is_gated_once_and_swapped_once(store) -> None:  # type: ignore[no-untyped-def]
    """Two replicas' promotion watchers may both take the same candidate: the gate's record is
    written once, and a version already promoted (or rejected) by the other replica is left alone."""
    from agent.jobs import JobStore, LockHeld
    from agent.prompt import PromptSettings
    from agent.vllm_policy import VllmSettings
    from serve.models.swap import SWAP_LOCK, VllmSwapController

    registry = _registry_with_a_candidate(store)
    jobs = JobStore(store.engine)
    jobs.acquire(SWAP_LOCK, "someone-else", ttl_s=600)
    controller = VllmSwapController(
        store, registry, VllmSettings(base_url="http://127.0.0.1:9"), PromptSettings()
    )

    promotion = Promotion(controller)

    async def twice_while_held() -> None:
        for _ in range(2):
            with pytest.raises(LockHeld):
                await promotion.gate_and_promote("nightly-1")

    asyncio.run(twice_while_held())
    gates = [e for e in registry.events("nightly-1") if e.event == "annotated:gate"]
    assert len(gates) == 1
    jobs.release(SWAP_LOCK, "someone-else")
    registry.promote("nightly-1", actor="the-other-replica")  # the other replica swapped it meanwhile
    before = registry.events()
    assert asyncio.run(promotion.gate_and_promote("nightly-1")) is None  # no second swap, no event
    assert registry.events() == before


def test_a_job_end_wakes_the_watcher_and_a_locked_candidate_waits_for_it(store, caplog) -> None:  # type: ignore[no-untyped-def]
    """The one path a candidate takes: the promotion watcher, which a job's end wakes at once (here
    the interval is an hour). When another swap holds the lock that is an expected turn, said in
    one line, and the candidate stays for the watcher's next pass."""
    import logging
    from datetime import UTC, datetime

    from agent.jobs import Job, JobStore
    from agent.prompt import PromptSettings
    from agent.vllm_policy import VllmSettings
    from serve.models.swap import SWAP_LOCK, SwapSettings, VllmSwapController
    from serve.service import _after_job

    registry = _registry_with_a_candidate(store)
    JobStore(store.engine).acquire(SWAP_LOCK, "another-swap", ttl_s=600)
    controller = VllmSwapController(
        store,
        registry,
        VllmSettings(base_url="http://127.0.0.1:9"),
        PromptSettings(),
        SwapSettings(watch_interval_s=3600),
    )
    promotion = Promotion(controller)
    job = Job("j1", "retrain", "succeeded", "api", None, datetime.now(UTC), detail={"candidate": "nightly-1"})

    def passes() -> int:
        return sum("promotion watcher:" in r.getMessage() for r in caplog.records)

    async def go() -> tuple[int, int]:
        watcher = asyncio.create_task(promotion.watch())
        for _ in range(50):
            await asyncio.sleep(0.1)
            if passes():
                break
        first = passes()
        await _after_job(promotion)(job)  # the job ends: no exception, the watcher looks again now
        for _ in range(50):
            await asyncio.sleep(0.1)
            if passes() > first:
                break
        watcher.cancel()
        return first, passes()

    with caplog.at_level(logging.INFO, logger="serve.models.promotion"):
        first, then = asyncio.run(go())
    assert (first, then) == (1, 2)
    assert registry.get("nightly-1").state == "candidate"  # still there for the next pass
