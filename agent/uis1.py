"""The ``uis1`` command: assembles the packages' own typer apps without importing them up front.

Each package declares its app in the ``uis1.commands`` entry-point group (see pyproject.toml).
This module knows no package by name: ``uis1 serve ...`` loads only ``serve.cli.service``, so the API
process never imports torch, and no package imports a sibling for the sake of the CLI.
"""

from __future__ import annotations

import os
import sys
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
    pretty_exceptions_enable=False,  # main() turns errors into one line (--debug: the traceback)
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


DEBUG_FLAG = "--debug"


def one_line(exc: BaseException) -> tuple[str, int]:
    """What went wrong, in one line that says what to do, and the exit code: 2 for input the user
    can correct (a setting, a config file, a path), 1 for the rest."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or exc.title
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        hint = " (`uis1 settings` checks UIS1_* variables)" if exc.title.endswith("Settings") else ""
        return f"invalid {exc.title}: {where}: {first['msg']}{more}{hint}", 2
    kind = type(exc)
    module = kind.__module__.split(".")[0]
    text = " ".join(str(exc).split()) or kind.__name__
    if module == "yaml":
        return f"not valid YAML: {text}", 2
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError):
        return text, 2
    if module == "sqlalchemy":
        cause = " ".join(str(getattr(exc, "orig", None) or exc).split()).split(" (Background on")[0][:200]
        if kind.__name__ in ("ArgumentError", "NoSuchModuleError"):
            example = "sqlite:///uis1.db or postgresql+psycopg://user@host/db"
            return (
                f"the store's URL is not one a database opens ({cause}); set UIS1_STORE__URL, e.g. {example}",
                2,
            )
        if kind.__name__ in ("OperationalError", "InterfaceError"):
            return f"the store's database does not answer ({cause}); check UIS1_STORE__URL", 1
        if kind.__name__ == "DatabaseError":
            return f"the store's database cannot be read ({cause}); check UIS1_STORE__URL", 1
    if isinstance(exc, LookupError | ValueError):
        return text, 1
    return f"{kind.__name__}: {text} (run again with {DEBUG_FLAG} for the traceback)", 1


def main() -> None:
    """``uis1``: an error the user can act on is one line on stderr and an exit code; ``--debug``
    (anywhere on the command line) shows the traceback instead."""

    # typer carries its own copy of click (pinned in the locks); its usage errors are these.
    from typer._click import exceptions as click

    debug = DEBUG_FLAG in sys.argv
    if debug:
        sys.argv.remove(DEBUG_FLAG)
    adb_port = os.environ.get("ANDROID_ADB_SERVER_PORT", "")
    if adb_port and not adb_port.isdigit():  # adbutils reads it when imported and fails with int()'s words
        typer.echo(f"error: ANDROID_ADB_SERVER_PORT is a port number, got {adb_port!r}", err=True)
        raise SystemExit(2)
    try:
        code = app(standalone_mode=False)
    except click.NoArgsIsHelpError as exc:  # a group without its command: its help
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        raise SystemExit(2) from None
    except click.ClickException as exc:  # a wrong option or argument: one line, like the others
        hint = (
            f" (see `{exc.ctx.command_path} --help`)" if isinstance(exc, click.UsageError) and exc.ctx else ""
        )
        typer.echo(f"error: {' '.join(exc.format_message().split())}{hint}", err=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        typer.echo("aborted", err=True)
        raise SystemExit(130) from None
    except Exception as exc:
        if debug:
            raise
        message, code = one_line(exc)
        typer.echo(f"error: {message}", err=True)
        raise SystemExit(code) from None
    raise SystemExit(code if isinstance(code, int) else 0)
