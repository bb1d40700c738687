"""``uis1 agent ...``: the policy contract from the command line (prompt, parsing, interchange)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

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
    steps = sum(len(json.loads(line)["steps"]) for line in lines)
    typer.echo(f"{len(lines)} episodes, {steps} steps", err=True)
