"""``uis1 demo``: the learning loop (``serve.demo.loop``) or the quick tour (``serve.demo.tour``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

demo_app = typer.Typer(help="Run the whole service on simulated phones.", add_completion=False)


@demo_app.command("demo")
def demo(
    policy: Annotated[
        str, typer.Option(help="starter (the loop), or for the tour: auto, vllm, local, tiny or expert.")
    ] = "starter",
    loop: Annotated[
        bool, typer.Option("--loop/--no-loop", help="The learning loop, or only the quick service tour.")
    ] = True,
    phones: Annotated[int, typer.Option(min=1, max=8, help="Simulated phones (the tour).")] = 2,
    port: Annotated[int | None, typer.Option(help="Port of the API (default: a free one).")] = None,
    keep_running: Annotated[
        bool, typer.Option(help="Keep the service up afterwards, for the viewer.")
    ] = False,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the store, screenshots and models go (default: a temp dir).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The loop's result as JSON on stdout.")] = False,
) -> None:
    """The product on one machine: simulated phones, the store, a policy, the API, and the loop.

    By default, the loop: a small starter model (trained here on first use, then cached) does five
    tasks; a scripted person corrects the ones it fails through the takeover API; the retraining job
    learns from that traffic; the candidate is gated and hot-swapped into the running policy; the
    tasks run again, with held-out instances, and a before/after table ends it (about 3 minutes on
    2 cores, plus about 4 for the starter the first time).

    `--no-loop` is the quick tour: a few tasks with the best policy available (`--policy`): a vLLM
    server at UIS1_POLICY__BASE_URL, a checkpoint at UIS1_LOCAL_MODEL_DIR, else a tiny random-weight
    model (which cannot do tasks); `--policy expert` uses the simulated tasks' own solvers.
    """
    if loop and policy == "starter":
        from serve.demo.loop import run_loop

        run_loop(data_dir=data_dir, keep_running=keep_running, port=port, as_json=json_out)
        return
    from serve.demo.tour import run_demo

    run_demo(
        "auto" if policy == "starter" else policy,
        phones=phones,
        port=port,
        keep_running=keep_running,
        data_dir=data_dir,
    )
