"""``uis1 serve`` (the API under uvicorn) and ``uis1 keys create|list|revoke``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from serve.auth import KeyStore

serve_app = typer.Typer(help="Run the agent API service.", add_completion=False)
keys_app = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True, add_completion=False)


@serve_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1, UIS1_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8080, UIS1_PORT).")] = None,
) -> None:
    """Start the API service with settings from UIS1_* variables."""
    import uvicorn

    from serve.app import create_app
    from serve.settings import ServeSettings

    settings = ServeSettings()
    updates = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    settings = settings.model_copy(update=updates)
    from serve.logs import setup_logging

    setup_logging()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_config=None, access_log=False,
                timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5)  # fmt: skip


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


@keys_app.command("list")
def list_keys() -> None:
    """List keys (ids and scopes; the secrets are not stored)."""
    for key in _keys().list():
        state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
        typer.echo(f"{key.id}  {','.join(sorted(key.scopes)):<12} {state:<18} {key.name}")


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
    policy: Annotated[str, typer.Option(help="auto, vllm, local, tiny or expert (see below).")] = "auto",
    phones: Annotated[int, typer.Option(min=1, max=8, help="Simulated phones.")] = 2,
    port: Annotated[int | None, typer.Option(help="Port of the API (default: a free one).")] = None,
    keep_running: Annotated[bool, typer.Option(help="Keep the service up after the tasks.")] = False,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the store and screenshots go (default: a temp dir).")
    ] = None,
) -> None:
    """Start simulated phones, the store, a policy and the API; run a few tasks and show them.

    The policy is the best available: a vLLM server at UIS1_POLICY__BASE_URL, a checkpoint at
    UIS1_LOCAL_MODEL_DIR, else a tiny random-weight model (which cannot do tasks). `--policy
    expert` uses the simulated tasks' own solvers, to watch tasks succeed.
    """
    from serve.demo import run_demo

    run_demo(policy, phones=phones, port=port, keep_running=keep_running, data_dir=data_dir)
