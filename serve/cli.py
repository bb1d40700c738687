"""``uis1 serve`` (the API under uvicorn), ``uis1 keys``, ``uis1 demo``, ``uis1 settings`` and
``uis1 healthcheck``; the model, job and scheduler commands are in ``serve.cli_models``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from serve.auth import KeyStore
    from serve.settings import ServeSettings

serve_app = typer.Typer(help="Run the agent API service.", add_completion=False)
keys_app = typer.Typer(
    help="API keys: create, generate, list, revoke.", no_args_is_help=True, add_completion=False
)


@serve_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1, UIS1_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (default 8080, UIS1_PORT).")
    ] = None,
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
    # What would otherwise fail inside uvicorn's start-up as a logged traceback: one error line.
    _can_listen(settings.host, settings.port)
    _store_opens(settings)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
    )


def _can_listen(host: str, port: int) -> None:
    """Refuse, in one line, an address the service could not listen on."""
    import socket

    from typer._click.exceptions import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                "choose another with --port/--host (or UIS1_PORT/UIS1_HOST)"
            ) from None


def _store_opens(settings: ServeSettings) -> None:
    """Connect to the task store once before the service starts (it migrates the store itself)."""
    from agent.store import make_engine

    engine = make_engine(settings.store.url)
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


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
def list_keys(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """List keys (ids and scopes; the secrets are not stored)."""
    import json

    from agent.console import print_table

    keys_store = _keys()
    keys = keys_store.list()
    if as_json:
        rows = [
            {
                "id": k.id,
                "name": k.name,
                "scopes": sorted(k.scopes),
                "created_at": k.created_at.isoformat(),
                "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
            }
            for k in keys
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not keys:
        typer.echo(f"no keys yet in {keys_store.engine.url} (uis1 keys create NAME)", err=True)
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
