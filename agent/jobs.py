"""Background jobs (retraining) and the lock that lets one run at a time across replicas.

A job is a row: kind, status (``queued``, ``running``, ``succeeded``, ``failed``, ``skipped``),
what triggered it (``schedule``, ``api:KEY``, ``cli``), the schedule slot it fills, timings, a
heartbeat, the reason it ended as it did and a JSON ``detail`` (curated set, run directory,
candidate version, gate decision). The API lists them (``/v1/jobs``).

The lock is one row per name with an expiry that the holder renews with its heartbeat. A job whose
holder died stops renewing; after ``ttl_s`` the next job takes the lock over, marks the dead one
``failed`` ("abandoned") and may resume its work from what it left (its run directory).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from agent.store import metadata
from agent.trajectory import as_utc, utcnow

log = logging.getLogger(__name__)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False, index=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("trigger", sa.String(64), nullable=False),
    sa.Column("slot", sa.String(64)),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True)),
    sa.Column("owner", sa.String(256)),
    sa.Column("reason", sa.Text),
    sa.Column("detail", sa.JSON, nullable=False),
    sa.UniqueConstraint("kind", "slot", name="uq_jobs_kind_slot"),
)
locks = sa.Table(
    "job_locks",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("owner", sa.String(256), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.SKIPPED)


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    status: str
    trigger: str
    slot: str | None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = None
    owner: str | None = None
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class JobError(RuntimeError):
    pass


class LockHeld(JobError):
    """Another live job holds the lock."""


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class JobStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def create(
        self, kind: str, *, trigger: str, slot: str | None = None, detail: dict[str, Any] | None = None
    ) -> Job | None:
        """A queued job; None when the (kind, slot) pair already has one (another scheduler won)."""
        job = Job(
            uuid.uuid4().hex, kind, JobStatus.QUEUED.value, trigger, slot, utcnow(), detail=detail or {}
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(jobs).values(**job.__dict__))
        except sa.exc.IntegrityError:
            return None
        return job

    def get(self, job_id: str) -> Job:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
        if row is None:
            raise JobError(f"no job {job_id!r}")
        return Job(**row._mapping)

    def list(self, kind: str | None = None, status: str | None = None, limit: int = 50) -> list[Job]:
        stmt = sa.select(jobs).order_by(jobs.c.created_at.desc(), jobs.c.id).limit(limit)
        if kind is not None:
            stmt = stmt.where(jobs.c.kind == kind)
        if status is not None:
            stmt = stmt.where(jobs.c.status == status)
        with self.engine.connect() as conn:
            return [Job(**r._mapping) for r in conn.execute(stmt)]

    def last(self, kind: str, status: str) -> Job | None:
        found = self.list(kind, status, limit=1)
        return found[0] if found else None

    def update(
        self,
        job_id: str,
        *,
        status: str | None = None,
        reason: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> Job:
        """Change a job's status and merge ``detail`` into what it has."""
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id).with_for_update()).first()
            if row is None:
                raise JobError(f"no job {job_id!r}")
            values: dict[str, Any] = {"heartbeat_at": utcnow()}
            if detail:
                values["detail"] = {**(row.detail or {}), **detail}
            if reason is not None:
                values["reason"] = reason
            if status is not None:
                values["status"] = status
                if status == JobStatus.RUNNING and row.started_at is None:
                    values["started_at"] = utcnow()
                if JobStatus(status).finished:
                    values["finished_at"] = utcnow()
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))
        return self.get(job_id)

    # -- the lock -----------------------------------------------------------------------------------
    def acquire(self, name: str, job_id: str, *, ttl_s: float, owner: str | None = None) -> Job | None:
        """Take the lock for ``job_id``. Returns the job whose expired lock was taken over (now
        marked failed), or None. Raises ``LockHeld`` while another job's lock is live."""
        owner = owner or default_owner()
        now = utcnow()
        expires = now + timedelta(seconds=ttl_s)
        abandoned: str | None = None
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(locks).where(locks.c.name == name).with_for_update()).first()
            if row is None:
                try:
                    with conn.begin_nested():
                        conn.execute(
                            sa.insert(locks).values(name=name, job_id=job_id, owner=owner, expires_at=expires)
                        )
                except sa.exc.IntegrityError:  # another process inserted it first
                    raise LockHeld(f"the {name} lock was just taken by another job") from None
            elif row.job_id == job_id or as_utc(row.expires_at) <= now:
                if row.job_id != job_id:
                    abandoned = row.job_id
                conn.execute(
                    sa.update(locks)
                    .where(locks.c.name == name)
                    .values(job_id=job_id, owner=owner, expires_at=expires)
                )
            else:
                raise LockHeld(
                    f"job {row.job_id} ({row.owner}) holds the {name} lock until "
                    f"{as_utc(row.expires_at):%Y-%m-%d %H:%M:%S} UTC"
                )
        if abandoned is None:
            return None
        try:
            previous = self.get(abandoned)
        except JobError:
            return None
        if not JobStatus(previous.status).finished:
            log.warning("job %s stopped renewing its lock: marking it failed", abandoned)
            previous = self.update(
                abandoned,
                status=JobStatus.FAILED,
                reason=f"abandoned: its process stopped renewing the lock; taken over by job {job_id}",
            )
        return previous

    def renew(self, name: str, job_id: str, *, ttl_s: float) -> None:
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.update(locks)
                .where(locks.c.name == name, locks.c.job_id == job_id)
                .values(expires_at=utcnow() + timedelta(seconds=ttl_s))
            )
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(heartbeat_at=utcnow()))
        if not done.rowcount:
            raise JobError(f"job {job_id} lost the {name} lock")

    def held(self, name: str) -> bool:
        """Whether a live holder has the lock (an expired one does not count)."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(locks.c.expires_at).where(locks.c.name == name)).first()
        return row is not None and as_utc(row.expires_at) > utcnow()

    def release(self, name: str, job_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(locks).where(locks.c.name == name, locks.c.job_id == job_id))
