"""``uis1 keys``: create, generate, list and revoke the service's API keys (in its database)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from serve.api.auth import KeyStore

keys_app = typer.Typer(
    help="API keys: create, generate, list, revoke.", no_args_is_help=True, add_completion=False
)


def _keys() -> KeyStore:
    from agent.store import make_engine
    from serve import db as serve_db
    from serve.api.auth import KeyStore
    from serve.settings import ServeSettings

    settings = ServeSettings()
    settings.store.screenshot_dir.mkdir(parents=True, exist_ok=True)
    if settings.store.url.startswith("sqlite:///"):
        from pathlib import Path

        Path(settings.store.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    keys = KeyStore(make_engine(settings.store.url))
    serve_db.migrate(keys.engine)
    return keys


@keys_app.command("create")
def create_key(
    name: Annotated[str, typer.Argument(help="Who or what uses the key.")],
    admin: Annotated[bool, typer.Option(help="Also allow admin routes.")] = False,
) -> None:
    """Create a key and print it (it is shown only once)."""
    from serve.api.auth import Scope

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
    from serve.api.auth import new_token

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
