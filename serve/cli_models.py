"""``uis1 models`` (list, show, register, promote, rollback), ``uis1 jobs`` and ``uis1 scheduler``:
the commands an operator runs against the store and the engine, beside the running services."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from serve.cli import warn_unknown_variables

models_app = typer.Typer(
    help="Model versions: list, show, register, promote, rollback.",
    no_args_is_help=True,
    add_completion=False,
)


def _service_parts() -> tuple[Any, Any, Any]:
    """The settings, a migrated store and the registry, from UIS1_* variables."""
    from agent.registry import ModelRegistry
    from agent.store import TrajectoryStore
    from serve.settings import ServeSettings

    settings = ServeSettings()
    store = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
    store.migrate()
    return settings, store, ModelRegistry(store.engine)


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


@models_app.command("list")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """Every version with its state and aliases."""
    import json

    _, store, registry = _service_parts()
    aliases: dict[str, list[str]] = {}
    for alias, name in registry.aliases().items():
        aliases.setdefault(name, []).append(alias)
    versions = registry.versions()
    store.engine.dispose()
    rows = [
        {
            "name": v.name,
            "state": v.state,
            "kind": v.kind,
            "parent": v.parent,
            "aliases": sorted(aliases.get(v.name, [])),
            "fingerprint": _fingerprint_state(v.info),
        }
        for v in versions
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"no model versions registered in {store.engine.url} (uis1 models register)", err=True)
        return
    from agent.console import print_table

    print_table(
        ("NAME", "STATE", "KIND", "PARENT", "ALIASES", "WEIGHTS"),
        (
            (r["name"], r["state"], r["kind"], r["parent"], ",".join(r["aliases"]), r["fingerprint"])
            for r in rows
        ),
    )


def _fingerprint_state(info: dict[str, Any]) -> str:
    """What is known of a version's weights: verified by a swap (its served answer to the weights
    probe matched the training job's record), failed, recorded only, or nothing."""
    from agent.fingerprint import INFO_KEY
    from serve.swap.base import CHECK_KEY

    check = info.get(CHECK_KEY)
    if isinstance(check, dict):
        return "verified" if check.get("verified") else "served unverified"
    return "recorded" if INFO_KEY in info else "-"


@models_app.command("show")
def show_model(name: Annotated[str, typer.Argument(help="A version name or alias.")]) -> None:
    """A version's record and history, as JSON."""
    import json

    _, store, registry = _service_parts()
    version = registry.resolve(name)
    if version is None:
        typer.echo(f"error: no version or alias {name!r}", err=True)
        raise typer.Exit(1)
    events = [
        {"event": e.event, "actor": e.actor, "at": e.at.isoformat(), "detail": e.detail}
        for e in registry.events(version.name)
    ]
    record = {**version.__dict__, "created_at": version.created_at.isoformat(), "events": events}
    record["updated_at"] = version.updated_at.isoformat() if version.updated_at else None
    typer.echo(json.dumps(record, indent=2, default=str))
    store.engine.dispose()


@models_app.command("register")
def register_model(
    name: Annotated[str, typer.Argument(help="The version's name (immutable).")],
    base: Annotated[str, typer.Option(help="The checkpoint directory (or the adapter's base).")],
    adapter: Annotated[str | None, typer.Option(help="A LoRA adapter directory over --base.")] = None,
    served_name: Annotated[
        str | None, typer.Option(help="The name vLLM serves it by (default: name).")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="base, full or adapter (default: from --adapter).")] = None,
    parent: Annotated[str | None, typer.Option(help="The version it was trained from.")] = None,
) -> None:
    """Register a version (e.g. the published UI-S1-7B the engine starts with, as kind base)."""
    from agent.console import choice
    from agent.registry import Kind

    choice(Kind, kind, "--kind", "kind")
    _, store, registry = _service_parts()
    version = registry.register(
        name, base=base, adapter=adapter, served_name=served_name, kind=kind, parent=parent, actor=_actor()
    )
    typer.echo(f"registered {version.name} ({version.kind}, served as {version.served_name})")
    store.engine.dispose()


def _swap(action: str, name: str | None, force: bool, reason: str | None) -> None:
    """Promote, stage or roll back the default alias through the version router, with the hot swap into
    the vLLM the services serve from."""
    import asyncio

    from agent.jobs import JobStore
    from agent.registry import DEFAULT_ALIAS
    from serve.swap import HotSwapController, SwapError
    from serve.versions import VersionRouter

    settings, store, registry = _service_parts()
    if settings.policy_backend == "local":
        store.engine.dispose()
        typer.echo(
            "error: the in-process policy is swapped inside the service that runs it: "
            f"POST /v1/models/{action} to it (an admin key)",
            err=True,
        )
        raise typer.Exit(1)
    prompt = settings.prompt_settings()
    router = VersionRouter(registry, None, prompt, JobStore(store.engine))
    router.swap = HotSwapController(
        store, registry, settings.policy, prompt, settings.swap, owner=f"{settings.replica_id}:cli"
    )

    async def run() -> Any:
        assert router.swap is not None
        try:
            if action == "promote":
                assert name is not None
                return await router.promote(
                    name, alias=DEFAULT_ALIAS, actor=_actor(), force=force, reason=reason
                )
            if action == "stage":
                assert name is not None
                return await router.stage(name, actor=_actor())
            return await router.rollback(alias=DEFAULT_ALIAS, actor=_actor(), reason=reason)
        finally:
            await router.swap.aclose()

    try:
        result = asyncio.run(run())
    except (SwapError, LookupError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.engine.dispose()
    if action == "stage":
        typer.echo(
            f"{result.version} is staged ({result.path}, {result.seconds:.1f}s): `uis1 models promote` flips to it"
        )
        return
    typer.echo(f"{result.version} now serves (was {result.previous}; {result.path}, {result.seconds:.1f}s)")


@models_app.command("promote")
def promote_model(
    name: Annotated[str, typer.Argument(help="The version to serve.")],
    force: Annotated[bool, typer.Option(help="Promote a rejected version anyway.")] = False,
    reason: Annotated[str | None, typer.Option(help="Recorded with the promotion.")] = None,
) -> None:
    """Swap a version into the running vLLM (load, canary, flip the default alias).

    A failed canary leaves the old version serving and the new one rejected (exit status 1).
    """
    _swap("promote", name, force, reason)


@models_app.command("stage")
def stage_model(name: Annotated[str, typer.Argument(help="The version to load and canary.")]) -> None:
    """Load a version into the running vLLM beside the one serving and canary it, without moving the
    default alias: promoting it within the stage's lifetime is then the alias flip alone.

    A failed canary rejects it (exit status 1); a version that would be swapped in place cannot be staged.
    """
    _swap("stage", name, False, None)


@models_app.command("rollback")
def rollback_model(
    reason: Annotated[str | None, typer.Option(help="Recorded with the rollback.")] = None,
) -> None:
    """Serve the previous version again; the rolled-back one is rejected."""
    _swap("rollback", None, False, reason)


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

    _, store, _ = _service_parts()
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

    _, store, _ = _service_parts()
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
    from serve.logs import setup_logging
    from serve.promotion import Promotion
    from serve.scheduler import Scheduler
    from serve.swap import HotSwapController

    setup_logging()
    warn_unknown_variables()
    settings, store, registry = _service_parts()
    controller = HotSwapController(
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
