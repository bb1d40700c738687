"""``uis1 retrain``: curate new traffic, train from the promoted version, evaluate, register a candidate.

    uis1 retrain --config retrain.yaml

One job at a time across every replica and node: the job takes the ``retrain`` lock in the
database and renews it while it works. A job that finds the lock held ends ``skipped``; one that
finds it expired (its holder died) marks the dead job failed and, when that job got as far as
curating, resumes its work: the same curated set and run directories, whose training resumes from
its last checkpoint. Steps, each recorded in the job's row (``/v1/jobs``):

1. curate the trajectory store (``train.curation``); with fewer new trusted training episodes than
   ``min_new_episodes`` since the last successful job, end ``skipped`` with the reason;
2. train the configured stages (SFT and/or semi-online RL) from the promoted version's weights
   (a first run starts from ``base_model``, which it registers and promotes);
3. evaluate the candidate and the promoted version on the same pinned evaluation: SOP on the
   held-out split (plus any pinned data) and success on simulated-phone tasks;
4. register the candidate with its training configs, data manifest, parent and both score sets.

The gate (promote or reject) and the hot swap belong to the service, which watches for new
candidates; this job never touches a serving engine.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from agent import fingerprint
from agent.jobs import Job, JobStatus, JobStore, LockHeld
from agent.registry import Kind, ModelRegistry, ModelVersion, RegistryError
from agent.trajectory import utcnow
from train.config import RetrainConfig
from train.curation import CuratedSet, curate_store
from train.data import InterchangeSource
from train.retrain_eval import evaluate_both

log = logging.getLogger(__name__)

JOB_KIND = "retrain"
LOCK = "retrain"


class _Heartbeat:
    """Renews the job's lock every third of its lifetime, from a thread, while training runs."""

    def __init__(self, jobs: JobStore, job_id: str, ttl_s: float) -> None:
        self.jobs, self.job_id, self.ttl_s = jobs, job_id, ttl_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retrain-heartbeat", daemon=True)
        self.lost: str | None = None

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.jobs.renew(LOCK, self.job_id, ttl_s=self.ttl_s)
            except Exception as exc:  # the database is away: the lock may lapse; say so
                self.lost = str(exc)
                log.warning("could not renew the retrain lock: %s", exc)


def retrain(
    config: RetrainConfig, *, job_id: str | None = None, trigger: str = "cli", progress: bool = True
) -> Job:
    """Run one retraining job (or take over and resume a dead one); returns the finished job row."""
    from agent.store import TrajectoryStore

    store = TrajectoryStore(config.store.url, config.store.screenshot_dir)
    store.migrate()
    jobs = JobStore(store.engine)
    registry = ModelRegistry(store.engine)
    try:
        job = jobs.get(job_id) if job_id else jobs.create(JOB_KIND, trigger=trigger)
        assert job is not None  # a job without a slot is always created
        try:
            abandoned = jobs.acquire(LOCK, job.id, ttl_s=config.lock_ttl_s)
        except LockHeld as exc:
            log.info("retraining skipped: %s", exc)
            return jobs.update(job.id, status=JobStatus.SKIPPED, reason=str(exc))
        try:
            jobs.update(job.id, status=JobStatus.RUNNING)
            with _Heartbeat(jobs, job.id, config.lock_ttl_s):
                if config.judge.enabled:
                    from train.judge import judge_episodes

                    jobs.update(job.id, detail={"stage": "judge"})
                    jobs.update(job.id, detail={"judge": judge_episodes(store, config.judge)})
                return _run_job(config, job, abandoned, jobs, registry, progress=progress)
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            # The reason is the job's record and the caller's one error line; the traceback with --debug.
            log.debug("retraining job %s failed", job.id, exc_info=True)
            jobs.update(job.id, status=JobStatus.FAILED, reason=reason[:2000])
            raise
        finally:
            jobs.release(LOCK, job.id)
    finally:
        store.engine.dispose()


def _run_job(
    config: RetrainConfig,
    job: Job,
    abandoned: Job | None,
    jobs: JobStore,
    registry: ModelRegistry,
    *,
    progress: bool,
) -> Job:
    """Curate, train each stage, evaluate against the parent, register the candidate; the job's
    record follows each stage (and a job left behind by a crash is resumed in its own directory)."""
    job_dir = _job_dir(config, job, abandoned, jobs)
    parent = _starting_version(config, registry)
    curated = _curate(config, job_dir, jobs, progress)
    jobs.update(
        job.id,
        detail={
            "parent": parent.name,
            "data_manifest": str(curated.dir / "manifest.json"),
            "curated": {
                k: curated.manifest[k] for k in ("train", "holdout", "new_train", "steps", "dropped")
            },
        },
    )
    new = int(curated.manifest["new_train"])
    if new < config.min_new_episodes:
        reason = (
            f"too little new data: {new} new trusted training episode(s) since the last run, "
            f"{config.min_new_episodes} needed"
        )
        log.info("retraining skipped: %s", reason)
        return jobs.update(job.id, status=JobStatus.SKIPPED, reason=reason)

    checkpoint, configs = _train_stages(config, job, jobs, curated, parent, job_dir, progress)
    jobs.update(job.id, detail={"stage": "evaluate", "checkpoint": str(checkpoint)})
    evaluation = evaluate_both(config, curated, job_dir, checkpoint, parent, registry, progress)
    candidate = _register(config, job, checkpoint, parent, registry, configs, curated, evaluation)
    log.info("registered candidate %s (parent %s)", candidate.name, parent.name)
    return jobs.update(
        job.id,
        status=JobStatus.SUCCEEDED,
        reason=f"registered candidate {candidate.name}",
        detail={"candidate": candidate.name, "stage": "done", "evaluation": evaluation},
    )


def _job_dir(config: RetrainConfig, job: Job, abandoned: Job | None, jobs: JobStore) -> Path:
    """The job's working directory: the abandoned job's, when one is resumed, else a new one."""
    resumed = abandoned is not None and Path(abandoned.detail.get("job_dir", "/nonexistent")).is_dir()
    job_dir = (
        Path(abandoned.detail["job_dir"]) if resumed and abandoned else config.work_dir / "jobs" / job.id
    )
    job_dir.mkdir(parents=True, exist_ok=True)
    jobs.update(
        job.id,
        detail={"job_dir": str(job_dir), **({"resumed_from": abandoned.id} if resumed and abandoned else {})},
    )
    return job_dir


def _train_stages(
    config: RetrainConfig,
    job: Job,
    jobs: JobStore,
    curated: CuratedSet,
    parent: ModelVersion,
    job_dir: Path,
    progress: bool,
) -> tuple[Path, dict[str, Any]]:
    """Each stage in turn from the parent's weights on the curated data (and the extra sources);
    returns the last checkpoint and each stage's resolved config."""
    start = Path(parent.weights or "")
    data = {
        "sources": [
            InterchangeSource(path=curated.train_file).model_dump(mode="json"),
            *(s.model_dump(mode="json") for s in config.extra_sources),
        ],
        "val_fraction": 0.0,
    }
    configs: dict[str, Any] = {}
    for stage in config.stages:
        stage_config = config.stage_config(stage, start, job_dir / stage, data, parent.name)
        configs[stage] = stage_config.model_dump(mode="json")
        jobs.update(job.id, detail={"stage": stage})
        start = _train(stage, stage_config, progress)
    return start, configs


def _register(
    config: RetrainConfig,
    job: Job,
    checkpoint: Path,
    parent: ModelVersion,
    registry: ModelRegistry,
    configs: dict[str, Any],
    curated: CuratedSet,
    evaluation: dict[str, Any],
) -> ModelVersion:
    """The checkpoint as a candidate version (an adapter, or full weights under the served name),
    with its lineage, training configs, data manifest and evaluation."""
    from train.checkpoints import model_and_adapter, read_record

    name = f"{config.version_prefix}-{utcnow():%Y%m%d-%H%M%S}-{job.id[:6]}"
    base, adapter = model_and_adapter(checkpoint)
    if fingerprint.INFO_KEY not in parent.info and parent.weights and Path(parent.weights).exists():
        # The version a swap replaces must be told apart from the candidate (agent.fingerprint).
        registry.annotate(
            parent.name,
            fingerprint.INFO_KEY,
            weights_fingerprint(Path(parent.weights), config),
            actor="retrain",
        )
    return registry.register(
        name,
        served_name=None if adapter else config.served_name,
        kind=Kind.ADAPTER if adapter else Kind.FULL,
        base=str(base),
        adapter=str(adapter) if adapter else None,
        parent=parent.name,
        actor=f"job:{job.id}",
        info={
            "job": job.id,
            "stages": list(config.stages),
            "training": configs,
            "metrics": read_record(checkpoint).get("metrics", {}),
            "data_manifest": curated.manifest | {"episodes": None},
            "evaluation": evaluation,
            fingerprint.INFO_KEY: weights_fingerprint(checkpoint, config),
        },
    )


def weights_fingerprint(weights: Path, config: RetrainConfig) -> dict[str, Any] | None:
    """What the weights answer on the fingerprint probe, in the trainer's numerics (transformers,
    on the evaluation's device): the record a swap checks the engine against."""
    from train.checkpoints import model_and_adapter
    from train.learner import resolve_device

    model, adapter = model_and_adapter(weights)
    try:
        return fingerprint.of_weights(
            model, adapter, device=resolve_device(config.evaluation.device)
        ).record()
    except Exception as exc:  # the candidate stands without it; its swap then says "served unverified"
        log.warning("no weights fingerprint for %s: %s", weights, exc)
        return None


def _starting_version(config: RetrainConfig, registry: ModelRegistry) -> ModelVersion:
    promoted = registry.promoted()
    if promoted is not None:
        if not promoted.weights or not Path(promoted.weights).exists():
            raise ValueError(
                f"the promoted version {promoted.name} has no weights on this machine "
                f"({promoted.weights}); mount its checkpoint here"
            )
        return promoted
    if config.base_model is None:
        raise ValueError(
            "no version is promoted yet: set base_model in the config (the checkpoint to start from)"
        )
    name = config.base_served_name or config.base_model.name
    try:
        version = registry.get(name)
    except RegistryError:
        version = registry.register(
            name,
            served_name=name,
            base=str(config.base_model),
            kind=Kind.BASE,
            actor="retrain",
            info={"note": "the starting point of retraining"},
        )
    registry.promote(version.name, actor="retrain", force=True, detail={"reason": "first retraining run"})
    return registry.get(version.name)


def _curate(config: RetrainConfig, job_dir: Path, jobs: JobStore, progress: bool) -> CuratedSet:
    out = job_dir / "data"
    previous_job = jobs.last(JOB_KIND, JobStatus.SUCCEEDED)
    previous = None
    if previous_job is not None and previous_job.detail.get("data_manifest"):
        path = Path(previous_job.detail["data_manifest"])
        previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    if (out / "manifest.json").is_file():  # a resumed job keeps the data its run was trained on
        from agent.interchange import load_jsonl

        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        return CuratedSet(out, load_jsonl(out / "train.jsonl"), load_jsonl(out / "holdout.jsonl"), manifest)
    settings = (
        config.curation.model_copy(update={"trust_judge": True}) if config.judge.enabled else config.curation
    )
    return curate_store(
        config.store.url, config.store.screenshot_dir, out, settings, previous=previous, progress=progress
    )


def _train(stage: str, stage_config: Any, progress: bool) -> Path:
    from train.checkpoints import latest_checkpoint

    if stage == "sft":
        from train.sft import train_sft

        run_dir = train_sft(stage_config, progress=progress)
    else:
        from train.rl import train_rl

        run_dir = train_rl(stage_config, progress=progress)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise RuntimeError(f"the {stage} stage wrote no checkpoint in {run_dir}")
    return checkpoint
