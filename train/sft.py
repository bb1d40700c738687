"""Supervised fine-tuning on expert trajectories (the stage before semi-online RL in the paper).

Every expert step is one example: the prompt the policy would see with the expert's history
(earlier expert actions, thought-free or with their stored thoughts), and the expert's response as
the target, cross-entropy on its tokens only.

    uis1 train sft --config sft.yaml
    deepspeed --num_gpus 8 $(which uis1) train sft --config sft.yaml
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.geometry import ScreenGeometry
from agent.prompt import build_conversation
from train.config import SFTConfig
from train.data import ExpertTrajectory
from train.learner import Item, out_of_time
from train.rollout import expert_response
from train.runs import Run, Stream, open_run, save
from train.tracking import Tracker, progress_bar


@dataclass(frozen=True)
class Example:
    trajectory: ExpertTrajectory
    step: int


def expert_responses(
    trajectory: ExpertTrajectory, run: Run, upto: int, thoughts: bool
) -> tuple[list[Any], list[str]]:
    """Screenshots 0..upto and the expert's responses for steps 0..upto (the last is the target),
    each action in pixels of its screenshot as the model sees it resized."""
    screenshots: list[Any] = []
    responses = []
    for step in trajectory.steps[: upto + 1]:
        screenshots.append(step.screenshot())
        resized = ScreenGeometry.for_screen(step.size, run.prompt.resize).resized
        responses.append(expert_response(step, resized, (step.thought or "") if thoughts else ""))
    return screenshots, responses


def _item(run: Run, example: Example, thoughts: bool) -> Item:
    screenshots, responses = expert_responses(example.trajectory, run, example.step, thoughts)
    turns = build_conversation(example.trajectory.goal, screenshots, responses[:-1], run.prompt)
    return Item(run.policy.sample(turns, responses[-1]))


def train_sft(
    config: SFTConfig, *, progress: bool = True, after_save: Callable[[int], bool] | None = None
) -> Path:
    """Train, saving every ``save_every`` steps and at the end. ``after_save(step)`` is called after
    each save (single-process runs); a true answer ends training there (an early stop on a check the
    caller makes of the saved checkpoint, without reloading the data for each stretch)."""
    run = open_run(config)
    examples = [Example(t, i) for t in run.train for i in range(len(t.steps))]
    stream: Stream[Example] = Stream(examples, config.seed, run.position)
    total = min(config.epochs * math.ceil(len(examples) / config.batch_size), config.max_steps or 1 << 30)
    tracker = Tracker(run.dir, resume_after=run.step if run.step else None)
    bar = progress_bar(progress and run.is_main, total, run.step, "sft")
    started = time.perf_counter()
    try:
        while run.step < total:
            t0 = time.perf_counter()
            batch = [stream.next() for _ in range(config.batch_size)]
            items = [_item(run, e, config.thoughts) for e in batch]
            t1 = time.perf_counter()
            update = run.learner.sft_update(items)
            t2 = time.perf_counter()
            run.step += 1
            if out_of_time(started, config.max_seconds):
                total = run.step  # the time budget is spent: this step is the last (and saved)
            metrics = {**update, "prepare_s": t1 - t0, "update_s": t2 - t1,
                       "tokens_per_s": update["tokens"] / (t2 - t1) if t2 > t1 else 0.0,
                       "examples": [f"{e.trajectory.id}:{e.step}" for e in batch]}  # fmt: skip
            if run.is_main:
                tracker.log(run.step, metrics)
            if run.step % config.save_every == 0 or run.step == total:
                save(config, run, stream.position, metrics, "sft")
                if after_save is not None and after_save(run.step):
                    break
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{update['loss']:.4f}")
    finally:
        if bar is not None:
            bar.close()
        tracker.close()
    return run.dir
