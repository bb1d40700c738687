"""The retraining schedule: a cron expression, and the job it starts as a separate process.

The service never imports the trainer (no torch in the API process): a job is ``uis1 retrain
--config FILE --job-id ID`` in a child process, which reports back through the jobs table and
the model registry. Several replicas may run the scheduler; each fire time is one row
(``kind, slot``) in the jobs table, so exactly one of them starts the job. When a job ends, the
promotion watcher gates and swaps the candidate it registered.

    uis1 scheduler          # the schedule and the promotion watcher, without the API
    UIS1_SCHEDULER__ENABLED=true uis1 serve   # both inside the API process

Cron (croniter): five fields (minute hour day-of-month month day-of-week, Sunday = 0 or 7) with
``*``, lists, ranges, steps and names (``MON-FRI``, ``JAN``), or ``@hourly``, ``@daily``/``@midnight``,
``@nightly`` (02:00), ``@weekly``, ``@monthly``, ``@yearly``; as in Vixie cron, when both day fields
are restricted either may match. Times are in ``scheduler.timezone`` (UTC by default).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.jobs import Job, JobStatus, JobStore
from agent.trajectory import utcnow

log = logging.getLogger(__name__)

# croniter knows @yearly, @monthly, @weekly, @daily, @midnight and @hourly; this one is ours.
MACROS = {"@nightly": "0 2 * * *"}


class CronError(ValueError):
    pass


class Cron:
    """A cron expression (croniter's dialect: five fields with names such as ``MON-FRI`` or ``JAN``,
    lists, ranges, steps and the @ macros); when both day fields are restricted, either may match."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._text = MACROS.get(expression.strip().lower(), expression.strip())
        if len(self._text.split()) != 5 and not self._text.startswith("@"):
            raise CronError(f"{expression!r}: a cron expression has 5 fields (minute hour day month weekday)")
        try:
            croniter(self._text)
        except (CroniterError, ValueError) as exc:
            raise CronError(f"{expression!r}: {exc}") from None

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after ``moment`` (in ``moment``'s time zone)."""
        try:
            fire: datetime = croniter(self._text, moment).get_next(datetime)
        except CroniterError as exc:  # e.g. 30 February: it never comes
            raise CronError(f"{self.expression!r} never fires: {exc}") from None
        return fire


class SchedulerSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    enabled: bool = Field(
        False, description="Run the schedule inside `uis1 serve` (`uis1 scheduler` always does)"
    )
    cron: str = Field("0 2 * * *", description="When retraining runs (5-field cron or @daily, ...)")
    timezone: str = Field("UTC", description="Time zone of the cron expression")
    retrain_config: Path | None = Field(None, description="The `uis1 retrain` config file (jobs need one)")
    # How a job runs: `uis1 retrain` beside this interpreter (the same installation) by default.
    command: list[str] = Field(
        default_factory=lambda: [str(Path(sys.executable).with_name("uis1")), "retrain"],
        description="How a job runs (JSON list; default: `uis1 retrain` of this installation)",
    )
    job_timeout_s: float = Field(12 * 3600.0, gt=0, description="A job running longer is stopped")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        Cron(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_zone(cls, value: str) -> str:
        zone(value)
        return value


def zone(name: str) -> tzinfo:
    """The time zone ``name``; UTC needs no time-zone database (slim images may have none)."""
    if name.upper() in ("UTC", "ETC/UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"unknown time zone {name!r} (is the tz database installed? pip install tzdata)"
        ) from exc


class Scheduler:
    def __init__(self, jobs: JobStore, settings: SchedulerSettings, *, on_job_end: Any = None) -> None:
        self.jobs = jobs
        self.settings = settings
        self.cron = Cron(settings.cron)
        self.zone = zone(settings.timezone)
        self.on_job_end = on_job_end  # async callable(job): the promotion watcher's turn
        self._running: dict[str, asyncio.Task[Job]] = {}

    def next_fire(self, after: datetime | None = None) -> datetime:
        return self.cron.next_after((after or utcnow()).astimezone(self.zone))

    async def run(self) -> None:
        """Start a job at each fire time, forever."""
        log.info(
            "retraining scheduled at %r (%s); next at %s",
            self.settings.cron,
            self.settings.timezone,
            self.next_fire().isoformat(),
        )
        while True:
            fire = self.next_fire()
            while (wait := (fire - utcnow()).total_seconds()) > 0:
                await asyncio.sleep(min(wait, 60.0))  # a clock change is noticed within a minute
            try:
                await self.fire(fire)
            except Exception:
                log.exception("the scheduled job at %s could not start", fire.isoformat())

    async def fire(self, at: datetime) -> Job | None:
        """Create the job of this fire time (unless another replica did) and start it."""
        job = await asyncio.to_thread(
            self.jobs.create,
            "retrain",
            trigger="schedule",
            slot=at.astimezone(self.zone).strftime("%Y-%m-%dT%H:%M%z"),
        )
        if job is None:
            log.info("the %s job was started by another replica", at.isoformat())
            return None
        self.start(job)
        return job

    def start(self, job: Job) -> asyncio.Task[Job]:
        task = asyncio.create_task(self._run_job(job), name=f"job-{job.id}")
        self._running[job.id] = task
        task.add_done_callback(lambda _: self._running.pop(job.id, None))
        return task

    async def _run_job(self, job: Job) -> Job:
        if self.settings.retrain_config is None:
            return await asyncio.to_thread(
                self.jobs.update,
                job.id,
                status=JobStatus.FAILED,
                reason="scheduler.retrain_config is not set",
            )
        command = [
            *self.settings.command,
            "--config",
            str(self.settings.retrain_config),
            "--job-id",
            job.id,
            "--trigger",
            job.trigger,
            "--quiet",
        ]
        log.info("starting job %s: %s", job.id, " ".join(command))
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(), self.settings.job_timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            err = f"killed after {self.settings.job_timeout_s:.0f}s".encode()
        finished = await asyncio.to_thread(self.jobs.get, job.id)
        if not JobStatus(finished.status).finished:  # the process died before it could say so
            tail = err.decode(errors="replace").strip().splitlines()[-5:]
            finished = await asyncio.to_thread(
                self.jobs.update,
                job.id,
                status=JobStatus.FAILED,
                reason=f"exit status {proc.returncode}: " + " | ".join(tail),
            )
        log.info("job %s ended %s: %s", job.id, finished.status, finished.reason)
        if self.on_job_end is not None:
            try:
                await self.on_job_end(finished)
            except Exception:
                log.exception("after job %s", job.id)
        return finished

    async def aclose(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
