"""``uis1 serve`` (the API under uvicorn), ``uis1 settings`` and ``uis1 healthcheck``.

The other command lines of the service are beside this one: ``keys``, ``models``, ``jobs`` (with
``uis1 scheduler``) and ``demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from serve.settings import ServeSettings

serve_app = typer.Typer(help="Run the agent API service.", add_completion=False)


@serve_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1, UIS1_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (default 8080, UIS1_PORT).")
    ] = None,
) -> None:
    """Start the API service with settings from UIS1_* variables."""
    import uvicorn

    from serve.api.app import create_app
    from serve.ops.logs import setup_logging
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


def service_parts() -> tuple[Any, Any, Any]:
    """The settings, a migrated store and the registry, from UIS1_* variables."""
    from agent.registry import ModelRegistry
    from agent.store import TrajectoryStore
    from serve.settings import ServeSettings

    settings = ServeSettings()
    store = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
    store.migrate()
    return settings, store, ModelRegistry(store.engine)
