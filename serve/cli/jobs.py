"""``uis1 jobs`` (list, show) and ``uis1 scheduler``: the retraining jobs in the store, and the
scheduler that starts them, run as a process of its own beside the services."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from serve.cli.service import service_parts, warn_unknown_variables

jobs_app = typer.Typer(
    help="Retraining jobs: list, show; the scheduler.", no_args_is_help=True, add_completion=False
)


@jobs_app.command("list")
def list_jobs(
    limit: Annotated[int, typer.Option(min=1)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """Recent jobs, newest first."""
    import json

    from agent.jobs import JobStore

    _, store, _ = service_parts()
    jobs = JobStore(store.engine).list(limit=limit)
    store.engine.dispose()
    if as_json:
        typer.echo(json.dumps([j.__dict__ for j in jobs], indent=2, default=str))
        return
    if not jobs:
        typer.echo(f"no jobs yet in {store.engine.url} (uis1 retrain, or POST /v1/jobs)", err=True)
        return
    from agent.console import print_table

    print_table(
        ("ID", "CREATED", "STATUS", "TRIGGER", "REASON"),
        ((j.id[:12], f"{j.created_at:%Y-%m-%d %H:%M}", j.status, j.trigger, j.reason) for j in jobs),
    )


@jobs_app.command("show")
def show_job(job_id: Annotated[str, typer.Argument(help="A job id (a unique prefix will do).")]) -> None:
    """One job's record, as JSON."""
    import json

    from agent.jobs import JobStore

    _, store, _ = service_parts()
    found = [j for j in JobStore(store.engine).list(limit=500) if j.id.startswith(job_id)]
    store.engine.dispose()
    if len(found) != 1:
        what = "no job matches" if not found else f"{len(found)} jobs match"
        typer.echo(f"error: {what} {job_id!r} (`uis1 jobs list` shows them)", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(found[0].__dict__, indent=2, default=str))


scheduler_app = typer.Typer(
    help="Run the retraining schedule and the promotion watcher.", add_completion=False
)


@scheduler_app.command("scheduler")
def scheduler() -> None:
    """Start `uis1 retrain` at each fire time of UIS1_SCHEDULER__CRON, then gate and swap its
    candidate (UIS1_SWAP__*); runs until stopped. Several may run: each fire time starts one job."""
    import asyncio

    from agent.jobs import JobStore
    from serve.models.promotion import Promotion
    from serve.models.swap import VllmSwapController
    from serve.ops.logs import setup_logging
    from serve.ops.scheduler import Scheduler

    setup_logging()
    warn_unknown_variables()
    settings, store, registry = service_parts()
    controller = VllmSwapController(
        store,
        registry,
        settings.policy,
        settings.prompt_settings(),
        settings.swap,
        owner=f"{settings.replica_id}:scheduler",
    )

    async def run() -> None:
        promotion = Promotion(controller)

        async def after(job: Any) -> None:
            if settings.swap.auto_promote:
                promotion.job_ended(job)

        loop = Scheduler(JobStore(store.engine), settings.scheduler, on_job_end=after)
        tasks = [asyncio.create_task(loop.run())]
        if settings.swap.auto_promote:
            tasks.append(asyncio.create_task(promotion.watch()))
        await asyncio.gather(*tasks)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        store.engine.dispose()
