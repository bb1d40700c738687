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
from functools import lru_cache
from pathlib import Path

from agent.geometry import ScreenGeometry
from agent.prompt import ImagePart, build_conversation, prepare_image
from train.config import SFTConfig
from train.data import ExpertTrajectory
from train.learner import Item, out_of_time
from train.rollout import expert_response
from train.runs import Run, Stream, open_run, save
from train.tracking import Tracker, progress_bar

# Decoded, resized screenshots kept across epochs (least recently used first out): decoding and
# resizing a 1080x2400 PNG is most of an example's preparation on a CPU, and every example shows up
# to ``image_limit`` of them. The number kept is this many bytes at the run's largest image.
IMAGE_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class Example:
    trajectory: ExpertTrajectory
    step: int
    index: int  # the trajectory's place in the run's training data (the image cache's key)


Images = Callable[[int, int], ImagePart]  # (trajectory index, step index) -> the prepared screenshot


def image_cache(run: Run) -> Images:
    """The run's training screenshots, each decoded and resized once while the cache holds it."""
    slots = max(1, IMAGE_CACHE_BYTES // (3 * run.prompt.resize.max_pixels))

    @lru_cache(maxsize=slots)
    def image(trajectory: int, step: int) -> ImagePart:
        return prepare_image(run.train[trajectory].steps[step].screenshot(), run.prompt)

    return image


def _item(run: Run, example: Example, thoughts: bool, images: Images) -> Item:
    """The expert's response at one step, after its earlier responses and the screens still shown
    (``image_limit``), each action in pixels of its screenshot as the model sees it resized."""
    upto, first_shown = example.step, example.step + 1 - run.prompt.image_limit
    shown = [images(example.index, i) if i >= first_shown else None for i in range(upto + 1)]
    responses = []
    for step in example.trajectory.steps[: upto + 1]:
        resized = ScreenGeometry.for_screen(step.size, run.prompt.resize).resized
        responses.append(expert_response(step, resized, (step.thought or "") if thoughts else ""))
    turns = build_conversation(example.trajectory.goal, shown, responses[:-1], run.prompt)
    return Item(run.policy.sample(turns, responses[-1]))


def train_sft(
    config: SFTConfig, *, progress: bool = True, after_save: Callable[[int], bool] | None = None
) -> Path:
    """Train, saving every ``save_every`` steps and at the end. ``after_save(step)`` is called after
    each save (single-process runs); a true answer ends training there (an early stop on a check the
    caller makes of the saved checkpoint, without reloading the data for each stretch)."""
    run = open_run(config)
    examples = [Example(t, i, k) for k, t in enumerate(run.train) for i in range(len(t.steps))]
    images = image_cache(run)
    stream: Stream[Example] = Stream(examples, config.seed, run.position)
    total = min(config.epochs * math.ceil(len(examples) / config.batch_size), config.max_steps or 1 << 30)
    tracker = Tracker(run.dir, resume_after=run.step if run.step else None)
    bar = progress_bar(progress and run.is_main, total, run.step, "sft")
    started = time.perf_counter()
    try:
        while run.step < total:
            t0 = time.perf_counter()
            batch = [stream.next() for _ in range(config.batch_size)]
            items = [_item(run, e, config.thoughts, images) for e in batch]
            t1 = time.perf_counter()
            update = run.learner.sft_update(items)
            t2 = time.perf_counter()
            run.step += 1
            if out_of_time(started, config.max_seconds):
                total = run.step  # the time budget is spent: this step is the last (and saved)
            metrics = {
                **update,
                "prepare_s": t1 - t0,
                "update_s": t2 - t1,
                "tokens_per_s": update["tokens"] / (t2 - t1) if t2 > t1 else 0.0,
                "examples": [f"{e.trajectory.id}:{e.step}" for e in batch],
            }
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
