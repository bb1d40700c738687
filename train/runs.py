"""What every training run shares: its directory, data, policy, learner, order of work and resume.

The order of work is a pure function of (seed, epoch): each epoch visits the training items in a
permutation drawn from ``Random(f"{seed}:{epoch}")``, and the loop's position (epoch, index) is
saved with each checkpoint. A run killed at any point and started again with the same config
resumes from its last checkpoint and sees exactly the items, in exactly the order, that an
uninterrupted run would have. Under a distributed launcher each rank takes every world-th item.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from agent.checkpoint import checkpoint_system_prompt
from agent.prompt import PromptSettings, system_prompt_text
from train.checkpoints import latest_checkpoint, model_and_adapter
from train.config import LearnerSettings, RLConfig, SFTConfig
from train.data import ExpertTrajectory, LoadReport, load, manifest, split
from train.learner import Learner, load_state, make_learner, resolve_device, world
from train.model import PolicyModel

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class Position:
    epoch: int = 0
    index: int = 0


class Stream(Generic[T]):
    """Items in the run's deterministic order, epoch after epoch, this rank's share only."""

    def __init__(self, items: Sequence[T], seed: int, position: Position | None = None) -> None:
        if not items:
            raise ValueError("no training data: the sources gave no trajectories for the train split")
        self.items = items
        self.seed = seed
        self.position = position or Position()
        self.rank, self.world = world()

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order[self.rank :: self.world] or order[:1]

    def next(self) -> T:
        order = self._order(self.position.epoch)
        if self.position.index >= len(order):
            self.position = Position(self.position.epoch + 1, 0)
            order = self._order(self.position.epoch)
        item = self.items[order[self.position.index]]
        self.position = Position(self.position.epoch, self.position.index + 1)
        return item


@dataclass
class Run:
    dir: Path
    train: list[ExpertTrajectory]
    val: list[ExpertTrajectory]
    manifest: dict[str, Any]
    policy: PolicyModel
    learner: Learner
    prompt: PromptSettings
    step: int = 0
    position: Position | None = None
    reference: dict[str, str] | None = None  # the KL reference this run uses (RL), saved with each checkpoint

    @property
    def is_main(self) -> bool:
        return world()[0] == 0


def warn_about(report: LoadReport, where: Path) -> None:
    if report.rejected:
        first = report.rejected[0]
        log.warning(
            "%d trajectories left out: a label no policy could write (first: %s, step %d: %s); "
            "all are listed in %s",
            len(report.rejected),
            first["source"],
            first["step"],
            first["reason"],
            where,
        )
    if report.swipe_contradictions:
        log.warning(
            "%d swipe steps store a direction that contradicts their coordinates (the direction is "
            "used); is the source's swipe_convention right? Listed in %s",
            len(report.swipe_contradictions),
            where,
        )


def _seed_everything(seed: int) -> None:
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def open_run(config: RLConfig | SFTConfig) -> Run:
    """Load the data, the policy (from the last checkpoint when resuming) and the learner."""
    _seed_everything(config.seed)
    run_dir = config.output_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    report = LoadReport()
    trajectories = load(config.data.sources, report)
    train, val = split(trajectories, config.data.val_fraction, config.data.split_seed)
    data_manifest = manifest(config.data.sources, train, val, report)
    warn_about(report, run_dir / "manifest.json")
    previous = latest_checkpoint(run_dir)
    if previous is not None:
        saved = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        if saved["sha256"] != data_manifest["sha256"]:
            raise RuntimeError(
                f"{run_dir} was trained on other data (manifest {saved['sha256'][:12]}, now "
                f"{data_manifest['sha256'][:12]}): use a new output_dir"
            )
    elif world()[0] == 0:
        (run_dir / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
        (run_dir / "manifest.json").write_text(json.dumps(data_manifest, indent=2), encoding="utf-8")
    prompt = PromptSettings(
        resize=config.resize, system_prompt=system_prompt_for(config.system_prompt, config.model)
    )
    keep_reference = isinstance(config, RLConfig) and bool(config.loss.kl_beta)
    policy = load_policy(config.model, config.learner, prompt, previous, keep_reference=keep_reference)
    learner = make_learner(policy, config.optim, config.learner)
    run = Run(run_dir, train, val, data_manifest, policy, learner, prompt)
    rank = world()[0]
    state_file = (
        None
        if previous is None
        else (previous / "state.pt" if rank == 0 else run_dir / f"state-rank{rank}-{previous.name}.pt")
    )
    if state_file is not None and state_file.is_file():
        state = load_state(state_file, learner)
        run.step = int(state["step"])
        run.position = Position(**state["position"])
    return run


def system_prompt_for(chosen: str | None, model: Path) -> str:
    """The run's system prompt: the one the config chooses, else the starting checkpoint's own."""
    if chosen:
        return system_prompt_text(chosen)
    base, adapter = model_and_adapter(model)
    return checkpoint_system_prompt(base, adapter)


def load_policy(
    model: Path,
    settings: LearnerSettings,
    prompt: PromptSettings,
    checkpoint: Path | None,
    *,
    keep_reference: bool = False,
) -> PolicyModel:
    """The policy to train: ``model`` (a full checkpoint, or an adapter to train further, or a base
    to put a fresh adapter on), or the run's last ``checkpoint`` when resuming.

    ``keep_reference``: when ``model`` is an adapter, its frozen copy rides along as the KL
    reference, also on resume: the reference is the policy the run *started* from, never the base
    before that adapter was trained, nor the last checkpoint.
    """
    device = resolve_device(settings.device)
    common: dict[str, Any] = {
        "prompt": prompt,
        "gradient_checkpointing": settings.gradient_checkpointing,
        "device": device,
        "dtype": settings.dtype,
    }
    start_base, start_adapter = model_and_adapter(model)
    reference = start_adapter if keep_reference else None
    if checkpoint is None:
        if start_adapter is not None:  # starting from an adapter checkpoint: train that adapter further
            return PolicyModel(
                start_base, adapter_dir=start_adapter, reference_adapter_dir=reference, **common
            )
        return PolicyModel(model, lora=settings.lora, **common)
    base, adapter = model_and_adapter(checkpoint)
    return PolicyModel(
        base, adapter_dir=adapter, reference_adapter_dir=reference if adapter else None, **common
    )


def save(
    config: RLConfig | SFTConfig, run: Run, position: Position, metrics: dict[str, Any], method: str
) -> None:
    """A checkpoint with its record (main rank), and the state a resume needs (every rank)."""
    from train.checkpoints import save_checkpoint
    from train.learner import save_state

    state = {"step": run.step, "position": {"epoch": position.epoch, "index": position.index}}
    if run.is_main:
        scalars = {k: v for k, v in metrics.items() if not isinstance(v, list)}
        record = {
            "config": config.model_dump(mode="json"),
            "manifest_sha256": run.manifest["sha256"],
            "metrics": scalars,
            "parent": config.parent_version,
            "method": method,
        }
        if run.reference is not None:
            record["reference"] = run.reference
        save_checkpoint(
            run.dir,
            run.step,
            run.policy,
            record,
            lambda where: save_state(where / "state.pt", run.learner, state),
        )
    else:  # other ranks keep their own optimiser shard's state beside the checkpoints
        save_state(run.dir / f"state-rank{world()[0]}-step-{run.step:06d}.pt", run.learner, state)
