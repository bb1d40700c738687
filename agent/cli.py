"""``uis1 agent ...``: the policy contract from the command line (prompt, parsing, interchange)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from agent.policy import Policy
    from agent.prompt import PromptSettings
    from agent.settings import AgentSettings
    from agent.store import TrajectoryStore
    from agent.trajectory import EpisodeStatus
    from devices.adb import AdbDriver

app = typer.Typer(
    help="The policy contract: prompt, response parsing, trajectory interchange.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command("prompt")
def show_prompt() -> None:
    """Print the UI-S1 system prompt."""
    from agent.prompt import SYSTEM_PROMPT

    typer.echo(SYSTEM_PROMPT)


@app.command("parse")
def parse(
    response: Annotated[
        str | None, typer.Argument(help="Response text; read from stdin when omitted.")
    ] = None,
) -> None:
    """Parse one model response and print the action (or the parse error) as JSON."""
    from agent.parsing import parse_response

    parsed = parse_response(response if response is not None else sys.stdin.read())
    typer.echo(parsed.model_dump_json(indent=2))
    if not parsed.ok:
        raise typer.Exit(1)


@app.command("convert")
def convert(
    source: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Interchange JSONL file.")],
    out: Annotated[
        Path | None, typer.Option(help="Write trajectory schema v1 JSONL here (default stdout).")
    ] = None,
) -> None:
    """Validate an interchange JSONL file and write it as trajectory schema v1 (one episode a line)."""
    from agent.interchange import InterchangeError, load_jsonl

    try:
        episodes = load_jsonl(source)
    except InterchangeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    lines = [episode.model_dump_json() for episode in episodes]
    if out is None:
        typer.echo("\n".join(lines))
    else:
        out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    steps = sum(len(episode.steps) for episode in episodes)
    typer.echo(f"{len(lines)} episodes, {steps} steps", err=True)


# `uis1 run GOAL` and `uis1 trajectories ...` are top-level commands (own entry points).
run_app = typer.Typer(help="Run one episode on a device.", add_completion=False)


@run_app.command("run")
def run_episode(
    goal: Annotated[str, typer.Argument(help='What to do, e.g. "Turn on Wi-Fi".')],
    device: Annotated[
        str,
        typer.Option(
            "--device", "-d", envvar="ANDROID_SERIAL", help="Device serial (see `uis1 devices list`)."
        ),
    ],
    policy: Annotated[
        str, typer.Option(help="vllm (an OpenAI-compatible server) or local (in-process).")
    ] = "vllm",
    base_url: Annotated[
        str | None, typer.Option(help="vLLM server URL (default from UIS1_POLICY__BASE_URL).")
    ] = None,
    served_model: Annotated[
        str | None, typer.Option("--served-model", help="Served model or adapter name.")
    ] = None,
    model: Annotated[Path | None, typer.Option(help="Checkpoint directory for --policy local.")] = None,
    adb_server: Annotated[
        str | None, typer.Option(help="adb server host:port (default: adb's own, ANDROID_ADB_SERVER_PORT).")
    ] = None,
    start_adb: Annotated[
        bool, typer.Option("--start-adb", help="Start a local adb server when none answers.")
    ] = False,
    max_steps: Annotated[int | None, typer.Option(help="Step budget.")] = None,
) -> None:
    """Run one episode on a device and print each step as it happens."""
    import asyncio

    from agent.episode import EpisodeRunner
    from agent.prompt import PromptSettings
    from agent.settings import AgentSettings
    from agent.store import TrajectoryStore

    settings = AgentSettings()
    prompt = PromptSettings(resize=settings.resize)
    chosen = _policy_for_run(policy, model, base_url, served_model, settings, prompt)
    driver = _driver_for_run(device, adb_server or settings.adb_server, start_adb=start_adb)
    store = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
    store.migrate()
    episode_settings = settings.episode.model_copy(update={"max_steps": max_steps} if max_steps else {})

    def show(episode, step) -> None:  # type: ignore[no-untyped-def]
        what = (
            step.action.to_json()
            if step.action
            else f"parse error: {step.parse_error.reason if step.parse_error else '?'}"
        )
        typer.echo(f"step {step.index + 1}: {what}" + (f"  [{step.error}]" if step.error else ""))

    runner = EpisodeRunner(chosen, driver, store, episode_settings, prompt=prompt, on_step=show)
    episode = asyncio.run(runner.run(goal))
    typer.echo(
        f"episode {episode.id}: {episode.status.value}" + (f" ({episode.error})" if episode.error else "")
    )
    if episode.answer:
        typer.echo(f"answer: {episode.answer}")
    if episode.status.value != "succeeded":
        raise typer.Exit(1)


def _policy_for_run(
    kind: str,
    model: Path | None,
    base_url: str | None,
    served_model: str | None,
    settings: AgentSettings,
    prompt: PromptSettings,
) -> Policy:
    """The policy ``uis1 run`` asked for: a vLLM server, or a checkpoint in process."""
    if kind == "local":
        if model is None:
            raise typer.BadParameter("--policy local needs --model DIR")
        from agent.local_policy import LocalPolicy

        return LocalPolicy(model, prompt=prompt)
    if kind == "vllm":
        from agent.vllm_policy import VllmPolicy

        updates = {k: v for k, v in {"base_url": base_url, "model": served_model}.items() if v}
        return VllmPolicy(settings.policy.model_copy(update=updates), prompt=prompt)
    raise typer.BadParameter("--policy is vllm or local")


def _driver_for_run(serial: str, server: str | None, *, start_adb: bool) -> AdbDriver:
    """A driver for ``serial`` through the adb server at ``server`` (else adb's own default); one is
    started only with ``--start-adb``, and only on this machine."""
    from devices.adb import AdbDriver
    from devices.adb_server import AdbClient, AdbServer, default_server, server_answers, split_server

    try:
        host, port = split_server(server or default_server())
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not server_answers(host, port):
        if not (start_adb and host in ("127.0.0.1", "localhost")):
            typer.echo(
                f"error: no adb server answers at {host}:{port}: start one (`adb start-server`), "
                "pass --start-adb, or name another with --adb-server",
                err=True,
            )
            raise typer.Exit(2)
        AdbServer(port=port).start()
    client = AdbClient(host=host, port=port)
    if serial not in {d.serial for d in client.list()}:
        typer.echo(
            f"error: no device {serial} on the adb server at {host}:{port} "
            "(`uis1 devices list` shows the connected ones)",
            err=True,
        )
        raise typer.Exit(2)
    return AdbDriver(client, serial)


trajectories_app = typer.Typer(
    help="Recorded episodes: list, show, export, import.", no_args_is_help=True, add_completion=False
)


def _store() -> TrajectoryStore:
    from agent.settings import AgentSettings
    from agent.store import TrajectoryStore

    settings = AgentSettings()
    store = TrajectoryStore(settings.store.url, settings.store.screenshot_dir)
    store.migrate()
    return store


def _status(value: str | None) -> EpisodeStatus | None:
    from agent.console import choice
    from agent.trajectory import EpisodeStatus

    return choice(EpisodeStatus, value or None, "--status", "status")


@trajectories_app.command("list")
def list_trajectories(
    status: Annotated[str | None, typer.Option(help="succeeded, failed, error, cancelled, running.")] = None,
    device: Annotated[str | None, typer.Option(help="Device serial.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """List recorded episodes, newest first."""
    import json

    from agent.store import EpisodeQuery

    query = EpisodeQuery(status=_status(status), device_serial=device, limit=limit)
    store = _store()
    found = store.query(query)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "id": e.id,
                        "created_at": e.created_at.isoformat(),
                        "status": e.status.value,
                        "steps": len(e.steps),
                        "goal": e.goal,
                    }
                    for e in found
                ],
                indent=2,
            )
        )
        return
    if not found:
        from sqlalchemy.engine import make_url

        where = make_url(store.url).render_as_string(hide_password=True)
        typer.echo(f"no episodes{' matching the filters' if status or device else ''} in {where}", err=True)
    else:
        from agent.console import print_table

        print_table(
            ("ID", "CREATED", "STATUS", "STEPS", "GOAL"),
            ((e.id, f"{e.created_at:%Y-%m-%d %H:%M}", e.status.value, len(e.steps), e.goal) for e in found),
        )


@trajectories_app.command("show")
def show_trajectory(
    episode_id: Annotated[str, typer.Argument(help="Episode id, or its first characters.")],
) -> None:
    """Print one episode as schema v1 JSON."""
    store = _store()
    try:
        typer.echo(store.get(store.resolve_id(episode_id)).model_dump_json(indent=2))
    except KeyError:
        typer.echo(
            f"error: no episode {episode_id} in {store.engine.url} (`uis1 trajectories list`)", err=True
        )
        raise typer.Exit(1) from None


@trajectories_app.command("delete")
def delete_trajectory(
    episode_id: Annotated[str, typer.Argument(help="Episode id, or its first characters.")],
    reason: Annotated[str | None, typer.Option(help="Why (kept with the deletion record).")] = None,
    by: Annotated[str | None, typer.Option(help="Who deletes it (default: this machine's user).")] = None,
) -> None:
    """Delete a finished episode: its steps, labels and screenshots no other episode shows. The
    deletion is recorded (``uis1 trajectories deletions``); later exports and curations never see it."""
    import getpass

    store = _store()
    try:
        found = store.get(store.resolve_id(episode_id))
    except KeyError:
        typer.echo(f"error: no episode {episode_id} (`uis1 trajectories list`)", err=True)
        raise typer.Exit(1) from None
    except LookupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if not found.status.finished:
        typer.echo(f"error: episode {found.id} is {found.status.value}: cancel it first", err=True)
        raise typer.Exit(1)
    who = by or f"cli {getpass.getuser()}"
    store.delete_episode(found.id, by=who, reason=reason)
    typer.echo(f"deleted {found.id} ({len(found.steps)} steps)")


@trajectories_app.command("deletions")
def list_deletions(
    limit: Annotated[int, typer.Option(min=1, help="How many.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, for scripts.")] = False,
) -> None:
    """List deleted episodes, newest first: which, when, by whom, why."""
    import json

    found = _store().deletions(limit=limit)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "id": d.episode_id,
                        "deleted_at": d.deleted_at.isoformat(),
                        "by": d.deleted_by,
                        "reason": d.reason,
                    }
                    for d in found
                ],
                indent=2,
            )
        )
        return
    if not found:
        typer.echo("no episodes deleted", err=True)
        return
    from agent.console import print_table

    print_table(
        ("ID", "DELETED", "BY", "REASON"),
        ((d.episode_id, f"{d.deleted_at:%Y-%m-%d %H:%M}", d.deleted_by, d.reason or "") for d in found),
    )


@trajectories_app.command("export")
def export_trajectories(
    out: Annotated[Path, typer.Argument(help="Folder to write episodes.jsonl and images/ into.")],
    status: Annotated[str | None, typer.Option(help="Only episodes with this status.")] = None,
) -> None:
    """Export episodes as UI-S1 interchange JSONL with their screenshots."""
    from agent.store import EpisodeQuery

    store = _store()
    wanted = _status(status)
    episodes = store.query(EpisodeQuery(status=wanted, limit=10**9)) if wanted else store.iter_all()
    from agent.console import tracked

    path = store.export_jsonl(tracked(episodes, "exporting"), out)
    typer.echo(f"wrote {path}")


@trajectories_app.command("import")
def import_trajectories(source: Annotated[Path, typer.Argument(exists=True, dir_okay=False)]) -> None:
    """Import an interchange JSONL file (screenshots beside it are copied into the store)."""
    from agent.interchange import InterchangeError

    try:
        episodes = _store().import_jsonl(source)
    except InterchangeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"imported {len(episodes)} episodes")
