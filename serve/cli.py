"""``uis1 serve`` (the API under uvicorn), ``uis1 keys``, ``uis1 settings`` and the model, job and
scheduler commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from serve.auth import KeyStore

serve_app = typer.Typer(help="Run the agent API service.", add_completion=False)
keys_app = typer.Typer(
    help="API keys: create, generate, list, revoke.", no_args_is_help=True, add_completion=False
)


@serve_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1, UIS1_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8080, UIS1_PORT).")] = None,
) -> None:
    """Start the API service with settings from UIS1_* variables."""
    import uvicorn

    from serve.app import create_app
    from serve.logs import setup_logging
    from serve.settings import ServeSettings

    setup_logging()
    warn_unknown_variables()
    settings = ServeSettings()
    updates = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    settings = settings.model_copy(update=updates)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
    )


def warn_unknown_variables() -> None:
    """Log each ``UIS1_*`` variable that no setting reads (pydantic-settings would ignore it)."""
    import logging

    from agent.settings import unknown_variables
    from serve.settings import ServeSettings

    for name, meant in unknown_variables(ServeSettings).items():
        hint = f" (did you mean {meant}?)" if meant else ""
        logging.getLogger("serve.settings").warning("%s is not a setting and is ignored%s", name, hint)


def _keys() -> KeyStore:
    from agent.store import make_engine
    from serve.auth import KeyStore
    from serve.settings import ServeSettings

    settings = ServeSettings()
    settings.store.screenshot_dir.mkdir(parents=True, exist_ok=True)
    if settings.store.url.startswith("sqlite:///"):
        from pathlib import Path

        Path(settings.store.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    keys = KeyStore(make_engine(settings.store.url))
    keys.migrate()
    return keys


@keys_app.command("create")
def create_key(
    name: Annotated[str, typer.Argument(help="Who or what uses the key.")],
    admin: Annotated[bool, typer.Option(help="Also allow admin routes.")] = False,
) -> None:
    """Create a key and print it (it is shown only once)."""
    from serve.auth import Scope

    scopes = {Scope.AGENT, Scope.ADMIN} if admin else {Scope.AGENT}
    key, token = _keys().create(name, scopes)
    typer.echo(token)
    typer.echo(
        f"key {key.id} ({', '.join(sorted(scopes))}) for {name}; store it now, it is not shown again",
        err=True,
    )


@keys_app.command("generate")
def generate_key(
    name: Annotated[str, typer.Argument(help="Who or what uses the key (no spaces).")],
    admin: Annotated[bool, typer.Option(help="Also allow admin routes.")] = False,
) -> None:
    """Print a new key as a keys-file line (NAME SCOPES TOKEN), without touching any database.

    Put the line in the file UIS1_API_KEYS_FILE names (on a cluster: the Secret behind it); the
    service applies the file when it starts, and revokes file keys whose line is gone.
    """
    from serve.auth import new_token

    if not name or any(c.isspace() for c in name):
        typer.echo("error: the name must be one word", err=True)
        raise typer.Exit(2)
    typer.echo(f"{name} {'admin,agent' if admin else 'agent'} {new_token()}")


@keys_app.command("list")
def list_keys() -> None:
    """List keys (ids and scopes; the secrets are not stored)."""
    from agent.console import print_table

    keys = _keys().list()
    if not keys:
        typer.echo("no keys yet (uis1 keys create NAME)", err=True)
        return
    print_table(
        ("ID", "SCOPES", "STATE", "NAME"),
        (
            (
                k.id,
                ",".join(sorted(k.scopes)),
                f"revoked {k.revoked_at:%Y-%m-%d}" if k.revoked_at else "active",
                k.name,
            )
            for k in keys
        ),
    )


@keys_app.command("revoke")
def revoke_key(key_id: Annotated[str, typer.Argument(help="The key's id (from `uis1 keys list`).")]) -> None:
    """Revoke a key; requests with it fail from now on."""
    if not _keys().revoke(key_id):
        typer.echo(f"error: no active key {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")


demo_app = typer.Typer(help="Run the whole service on simulated phones.", add_completion=False)


@demo_app.command("demo")
def demo(
    policy: Annotated[
        str, typer.Option(help="starter (the loop), or for the tour: auto, vllm, local, tiny or expert.")
    ] = "starter",
    loop: Annotated[
        bool, typer.Option("--loop/--no-loop", help="The learning loop, or only the quick service tour.")
    ] = True,
    phones: Annotated[int, typer.Option(min=1, max=8, help="Simulated phones (the tour).")] = 2,
    port: Annotated[int | None, typer.Option(help="Port of the API (default: a free one).")] = None,
    keep_running: Annotated[
        bool, typer.Option(help="Keep the service up afterwards, for the viewer.")
    ] = False,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the store, screenshots and models go (default: a temp dir).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The loop's result as JSON on stdout.")] = False,
) -> None:
    """The product on one machine: simulated phones, the store, a policy, the API, and the loop.

    By default, the loop: a small starter model (trained here on first use, then cached) does five
    tasks; a scripted person corrects the ones it fails through the takeover API; the retraining job
    learns from that traffic; the candidate is gated and hot-swapped into the running policy; the
    tasks run again, with held-out instances, and a before/after table ends it (about 3 minutes on
    2 cores, plus about 4 for the starter the first time).

    `--no-loop` is the quick tour: a few tasks with the best policy available (`--policy`): a vLLM
    server at UIS1_POLICY__BASE_URL, a checkpoint at UIS1_LOCAL_MODEL_DIR, else a tiny random-weight
    model (which cannot do tasks); `--policy expert` uses the simulated tasks' own solvers.
    """
    if loop and policy == "starter":
        from serve.demo_loop import run_loop

        run_loop(data_dir=data_dir, keep_running=keep_running, port=port, as_json=json_out)
        return
    from serve.demo import run_demo

    run_demo(
        "auto" if policy == "starter" else policy,
        phones=phones,
        port=port,
        keep_running=keep_running,
        data_dir=data_dir,
    )


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
        }
        for v in versions
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no model versions registered (uis1 models register)", err=True)
        return
    from agent.console import print_table

    print_table(
        ("NAME", "STATE", "KIND", "PARENT", "ALIASES"),
        ((r["name"], r["state"], r["kind"], r["parent"], ",".join(r["aliases"])) for r in rows),
    )


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
    _, store, registry = _service_parts()
    version = registry.register(
        name, base=base, adapter=adapter, served_name=served_name, kind=kind, parent=parent, actor=_actor()
    )
    typer.echo(f"registered {version.name} ({version.kind}, served as {version.served_name})")
    store.engine.dispose()


def _swap(action: str, name: str | None, force: bool, reason: str | None) -> None:
    """Promote or roll back the default alias through the version router, with the hot swap into
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
        typer.echo("no jobs yet (uis1 retrain, or POST /v1/jobs)", err=True)
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
        typer.echo(f"error: {len(found)} jobs match {job_id!r}", err=True)
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

    async def after(job: Any) -> None:
        if settings.swap.auto_promote and job.detail.get("candidate"):
            await controller.gate_and_promote(str(job.detail["candidate"]), actor="scheduler")

    async def run() -> None:
        loop = Scheduler(JobStore(store.engine), settings.scheduler, on_job_end=after)
        tasks = [asyncio.create_task(loop.run())]
        if settings.swap.auto_promote:
            tasks.append(asyncio.create_task(controller.watch()))
        await asyncio.gather(*tasks)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        store.engine.dispose()


settings_app = typer.Typer(help="The service's settings (UIS1_* variables).", add_completion=False)


@settings_app.command("settings")
def show_settings(
    markdown: Annotated[bool, typer.Option(help="Print the reference of every setting as Markdown.")] = False,
) -> None:
    """Check the UIS1_* variables set here; exits 1 on an unknown or invalid one.

    Prints each variable that is set (secrets hidden) and each one no setting reads: pydantic would
    ignore a misspelt name and leave the default in force.
    """
    import os

    from pydantic import ValidationError

    from agent.settings import describe, markdown_table, unknown_variables
    from serve.settings import ServeSettings

    if markdown:
        typer.echo(markdown_table(ServeSettings), nl=False)
        return
    failed = False
    try:
        ServeSettings()
    except ValidationError as exc:
        failed = True
        for error in exc.errors():
            where = "UIS1_" + "__".join(str(p) for p in error["loc"]).upper()
            typer.echo(f"invalid  {where}: {error['msg']}", err=True)
    known = {doc.env: doc for doc in describe(ServeSettings)}
    secret = ("URL", "KEY", "PASSWORD", "TOKEN")
    for name in sorted(n for n in os.environ if n.upper() in known):
        value = "(hidden)" if any(s in name.upper() for s in secret) else os.environ[name]
        typer.echo(f"set      {name}={value}")
    for name, meant in unknown_variables(ServeSettings).items():
        failed = True
        typer.echo(f"unknown  {name}" + (f" (did you mean {meant}?)" if meant else ""), err=True)
    if failed:
        raise typer.Exit(1)


healthcheck_app = typer.Typer(help="Probe the running service's /healthz.", add_completion=False)


@healthcheck_app.command("healthcheck")
def healthcheck(
    url: Annotated[str | None, typer.Option(help="Default: /healthz on 127.0.0.1 at UIS1_PORT.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 3.0,
) -> None:
    """Exit 0 when the service answers /healthz (the container image's HEALTHCHECK)."""
    import httpx

    from serve.settings import ServeSettings

    target = url or f"http://127.0.0.1:{ServeSettings().port}/healthz"
    try:
        httpx.get(target, timeout=timeout).raise_for_status()
    except httpx.HTTPError as exc:
        typer.echo(f"unhealthy: {target}: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("ok")
