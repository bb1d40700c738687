"""``uis1 train ...``: SFT, semi-online RL, evaluation and adapter merging, each from one config file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Train and evaluate the policy (SFT, semi-online RL, SOP).",
    no_args_is_help=True,
    add_completion=False,
)

ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", exists=True, dir_okay=False, help="YAML, TOML or JSON.")
]
OutputOption = Annotated[Path | None, typer.Option("--output-dir", help="Override the config's output_dir.")]
StepsOption = Annotated[int | None, typer.Option("--max-steps", help="Stop after this many training steps.")]
QuietOption = Annotated[bool, typer.Option("--quiet", help="No progress bar.")]


def _overrides(output_dir: Path | None, max_steps: int | None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if output_dir is not None:
        found["output_dir"] = str(output_dir.resolve())
    if max_steps is not None:
        found["max_steps"] = max_steps
    return found


def _load(path: Path, kind: str, overrides: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from agent.checkpoint import require_checkpoint
    from train.config import load_config

    try:
        config = load_config(path, kind, overrides)
        require_checkpoint(config.model)  # before the data is read, not after
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {config_error(path, exc)}", err=True)
        raise typer.Exit(2) from None
    return config


def config_error(path: Path, exc: Exception) -> str:
    """A config file's problem in one line, the file named once."""
    from agent.uis1 import one_line

    message = one_line(exc)[0]
    return message if message.startswith(str(path)) else f"{path}: {message}"


@app.command("sft")
def sft(
    config: ConfigOption,
    output_dir: OutputOption = None,
    max_steps: StepsOption = None,
    quiet: QuietOption = False,
) -> None:
    """Supervised fine-tuning on expert trajectories (resumes from the last checkpoint)."""
    from train.sft import train_sft

    run_dir = train_sft(_load(config, "sft", _overrides(output_dir, max_steps)), progress=not quiet)
    typer.echo(f"done: {run_dir}")


@app.command("rl")
def rl(
    config: ConfigOption,
    output_dir: OutputOption = None,
    max_steps: StepsOption = None,
    quiet: QuietOption = False,
) -> None:
    """Semi-online RL with patching (resumes from the last checkpoint)."""
    from train.rl import train_rl

    run_dir = train_rl(_load(config, "rl", _overrides(output_dir, max_steps)), progress=not quiet)
    typer.echo(f"done: {run_dir}")


@app.command("eval")
def evaluate(
    config: ConfigOption,
    model: Annotated[Path | None, typer.Option(help="Override the config's model (a checkpoint).")] = None,
    output: Annotated[Path | None, typer.Option(help="Where the results JSON goes.")] = None,
    quiet: QuietOption = False,
) -> None:
    """SOP (PG, TSR, Score) and step metrics; prints a table and writes JSON."""
    from train.evaluate import format_table, run_eval

    overrides: dict[str, Any] = {}
    if model is not None:
        overrides["model"] = str(model.resolve())
    if output is not None:
        overrides["output"] = str(output.resolve())
    results = run_eval(_load(config, "eval", overrides), progress=not quiet)
    typer.echo(format_table(results))
    typer.echo(f"results: {results['output']}")


@app.command("merge")
def merge(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="An adapter checkpoint.")],
    out: Annotated[Path, typer.Option("--out", help="Where the merged full checkpoint goes.")],
) -> None:
    """Fold a LoRA adapter checkpoint into its base model (a full checkpoint for vLLM)."""
    from train.checkpoints import merge_adapter

    typer.echo(f"merged: {merge_adapter(checkpoint, out)}")


@app.command("show")
def show(checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)]) -> None:
    """Print a checkpoint's record (config, data manifest hash, metrics, parent)."""
    from train.checkpoints import read_record

    typer.echo(json.dumps(read_record(checkpoint), indent=2))


retrain_app = typer.Typer(
    help="Curate new traffic, retrain from the promoted version, register a candidate.", add_completion=False
)


@retrain_app.command("retrain")
def retrain(
    config: ConfigOption,
    job_id: Annotated[
        str | None, typer.Option("--job-id", help="Run this queued job (the scheduler's).")
    ] = None,
    trigger: Annotated[str, typer.Option(help="What started the job, for its record.")] = "cli",
    quiet: QuietOption = False,
    check: Annotated[
        bool, typer.Option("--check", help="Only read and validate the config, then exit.")
    ] = False,
) -> None:
    """One retraining job: curate, skip when there is too little new data, train, evaluate, register.

    Exit status: 0 done (a candidate registered) or skipped (the reason is printed), 1 failed,
    2 the config is invalid.
    """
    import logging

    from pydantic import ValidationError

    from train.config import load_retrain_config
    from train.retrain import retrain as run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its migration chatter is not the job's
    try:
        settings = load_retrain_config(config)
    except (ValidationError, ValueError) as exc:
        typer.echo(f"error: {config_error(config, exc)}", err=True)
        raise typer.Exit(2) from None
    if check:
        typer.echo(f"{config}: valid (stages {', '.join(settings.stages)}, work_dir {settings.work_dir})")
        return
    job = run(settings, job_id=job_id, trigger=trigger, progress=not quiet)
    typer.echo(
        json.dumps(
            {
                "job": job.id,
                "status": job.status,
                "reason": job.reason,
                "candidate": job.detail.get("candidate"),
            }
        )
    )
    if job.status == "failed":
        raise typer.Exit(1)
