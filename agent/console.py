"""What every package's command line shares: enum options checked lazily, aligned tables, and
progress bars on a terminal. The root ``uis1`` command itself is ``agent.uis1``."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import Any, TypeVar

import typer

T = TypeVar("T")
E = TypeVar("E", bound=Enum)


def choice(kind: type[E], value: str | None, option: str, noun: str) -> E | None:
    """``value`` as a member of the enum ``kind`` (None stays None); anything else is a usage error
    that lists the choices, for options typed as plain strings to keep imports lazy."""
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(str(member.value) for member in kind)
        raise typer.BadParameter(f"{value!r} is not a {noun} ({choices})", param_hint=f"'{option}'") from None


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Rows under their headers, aligned by rich (whole lines in a pipe, not cut to 80 columns)."""
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=1000, no_color=True)
    table = Table(*headers, box=None, pad_edge=False, header_style="bold", show_edge=False)
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    with console.capture() as captured:
        console.print(table)
    for line in captured.get().splitlines():
        typer.echo(line.rstrip(), color=sys.stdout.isatty())


def tracked(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    """``items`` with a rich progress bar on stderr while they are consumed (on a terminal only:
    a pipe or a log file gets no bar)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal, transient=False) as progress:
        yield from progress.track(items, total=total, description=label)
