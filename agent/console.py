"""The ``uis1`` command: assembles the packages' own typer apps without importing them up front.

Each package declares its app in the ``uis1.commands`` entry-point group (see pyproject.toml).
This module knows no package by name: ``uis1 serve ...`` loads only ``serve.cli``, so the API
process never imports torch, and no package imports a sibling for the sake of the CLI.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points, version
from typing import Any

import typer

ENTRY_POINT_GROUP = "uis1.commands"
DISTRIBUTION = "ui-s1"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


class _LazyGroup(typer.core.TyperGroup):
    """A click group whose subcommands are entry points, imported when first asked for."""

    # Typer vendors click and keeps its types private: the overrides take and give them as Any.
    def list_commands(self, ctx: Any) -> list[str]:
        return sorted({*super().list_commands(ctx), *_entry_points()})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        ep = _entry_points().get(cmd_name)
        if ep is None:
            return None
        app = ep.load()
        command = typer.main.get_command(app)
        command.name = cmd_name
        return command


app = typer.Typer(
    cls=_LazyGroup,
    help="UI-S1 Agent Service: drive Android phones with a vision-language policy and keep training it.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"{DISTRIBUTION} {version(DISTRIBUTION)}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the installed version and exit.",
    ),
) -> None:
    # A callback also keeps typer from collapsing a one-command app into that command.
    pass


@app.command("version")
def show_version() -> None:
    """Print the installed version."""
    typer.echo(f"{DISTRIBUTION} {version(DISTRIBUTION)}")


def main() -> None:
    app()
