"""``uis1 models`` (list, show, register, promote, stage, rollback): the model versions in the
registry, and swaps into the vLLM the services serve from, run beside the running services."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from serve.cli.service import service_parts

models_app = typer.Typer(
    help="Model versions: list, show, register, promote, rollback.",
    no_args_is_help=True,
    add_completion=False,
)


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


@models_app.command("list")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """Every version with its state and aliases."""
    import json

    _, store, registry = service_parts()
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
    from serve.models.swap.base import CHECK_KEY

    check = info.get(CHECK_KEY)
    if isinstance(check, dict):
        return "verified" if check.get("verified") else "served unverified"
    return "recorded" if INFO_KEY in info else "-"


@models_app.command("show")
def show_model(name: Annotated[str, typer.Argument(help="A version name or alias.")]) -> None:
    """A version's record and history, as JSON."""
    import json

    _, store, registry = service_parts()
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
    _, store, registry = service_parts()
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
    from serve.models.routing import ModelRouter
    from serve.models.swap import SwapError, VllmSwapController

    settings, store, registry = service_parts()
    if settings.policy_backend == "local":
        store.engine.dispose()
        typer.echo(
            "error: the in-process policy is swapped inside the service that runs it: "
            f"POST /v1/models/{action} to it (an admin key)",
            err=True,
        )
        raise typer.Exit(1)
    prompt = settings.prompt_settings()
    swap = VllmSwapController(
        store, registry, settings.policy, prompt, settings.swap, owner=f"{settings.replica_id}:cli"
    )
    router = ModelRouter(registry, None, prompt, JobStore(store.engine), swap=swap)

    async def run() -> Any:
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
            await swap.aclose()

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
