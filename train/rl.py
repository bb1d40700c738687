"""Semi-online RL (the UI-S1 method): patched rollouts, step- and episode-level advantages, PPO.

One training step: draw ``tasks_per_step`` expert trajectories (dynamic sampling drops groups
whose rollouts all did about equally well, drawing more up to a bound), roll each out N times in
lockstep with patching, score every step, compute advantages per group, recompute the old and
reference log-probs, then take ``mini_batches`` optimiser steps over the shuffled samples.

    uis1 train rl --config rl.yaml                                  # one process (CPU or 1 GPU)
    deepspeed --num_gpus 8 $(which uis1) train rl --config rl.yaml  # one node, 8 GPUs
    torchrun --nnodes 4 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 \\
        $(which uis1) train rl --config rl.yaml                     # 4 nodes (learner.backend: deepspeed)
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from train.advantages import StepSample, group_advantages, group_spread, spread_keeps
from train.batching import chunks, logprobs_batch
from train.config import RLConfig
from train.data import ExpertTrajectory
from train.evaluate import sop
from train.learner import Item, mini_batches, out_of_time
from train.rollout import Rollout, RolloutEngine, SemiOnlineRollout, TransformersEngine
from train.runs import Run, Stream, open_run, save
from train.tracking import Tracker, progress_bar

log = logging.getLogger(__name__)


class SeededEngine(TransformersEngine):
    """Sampling seeds derived from (run seed, step, call): a resumed run samples what the
    uninterrupted one would have."""

    def at_step(self, seed: int, step: int) -> None:
        self._seed = seed * 100_003 + step
        self._calls = 0


def make_engine(config: RLConfig, run: Run) -> RolloutEngine:
    if config.engine.kind == "vllm":
        from train.vllm_engine import VllmEngine

        engine: RolloutEngine = VllmEngine(config.engine, run.policy, run.dir)
        return engine
    return SeededEngine(run.policy, seed=config.seed)


Group = tuple[ExpertTrajectory, list[Rollout]]


def _draw(
    config: RLConfig, roller: SemiOnlineRollout, stream: Stream[ExpertTrajectory]
) -> tuple[list[Group], list[Group], list[str], list[float | None]]:
    """Groups for one step: (kept groups, groups dropped by dynamic sampling, ids drawn, and the
    R_0 spread of each group drawn, what η is compared with)."""
    spreads: list[float | None] = []
    kept: list[Group] = []
    dropped: list[Group] = []
    drawn: list[str] = []
    budget = config.tasks_per_step + (
        config.dynamic_sampling.max_extra_draws if config.dynamic_sampling.enabled else 0
    )
    while len(kept) < config.tasks_per_step and len(drawn) < budget:
        trajectory = stream.next()
        drawn.append(trajectory.id)
        rollouts = roller.run(trajectory)
        spread = group_spread(_samples(rollouts), config.advantage, config.dynamic_sampling.signal)
        spreads.append(spread)
        if config.dynamic_sampling.enabled and not spread_keeps(spread, config.dynamic_sampling.eta):
            dropped.append((trajectory, rollouts))
            continue
        kept.append((trajectory, rollouts))
    return kept, dropped, drawn, spreads


def _samples(rollouts: Sequence[Rollout]) -> list[list[StepSample]]:
    return [[StepSample(s.reward.reward, s.matched) for s in r.steps] for r in rollouts]


def _items(config: RLConfig, run: Run, groups: Sequence[Group]) -> list[Item]:
    items = []
    for _, rollouts in groups:
        advantages = group_advantages(_samples(rollouts), config.advantage)
        for rollout, values in zip(rollouts, advantages, strict=True):
            for record, advantage in zip(rollout.steps, values, strict=True):
                response = (
                    record.response.token_ids
                    if record.response.token_ids is not None
                    else record.response.text
                )
                items.append(Item(run.policy.sample(record.turns, response), advantage))
    return items


@torch.no_grad()
def _old_and_reference(config: RLConfig, run: Run, items: Sequence[Item], reference: Any) -> float:
    """Fills in the log-probs under the sampling weights and the reference; returns the seconds the
    old log-probs took (the rest is the reference's)."""
    run.policy.model.eval()
    start = time.perf_counter()
    for item, logp in zip(items, _scores(run.policy, items, config.learner.micro_batch), strict=True):
        item.old_logp = logp
    old_s = time.perf_counter() - start
    if not config.loss.kl_beta:
        return old_s
    # An adapter's reference is the starting adapter's frozen copy (or the base without it).
    scorer = run.policy if reference is None else reference
    with run.policy.reference() if reference is None else contextlib.nullcontext():
        for item, logp in zip(items, _scores(scorer, items, config.learner.micro_batch), strict=True):
            item.ref_logp = logp
    return old_s


def _scores(scorer: Any, items: Sequence[Item], micro_batch: int) -> list[torch.Tensor]:
    """Each item's per-token log-probs under ``scorer``, ``micro_batch`` samples per forward pass."""
    return [
        logp
        for batch in chunks(items, micro_batch)
        for logp, _ in logprobs_batch(scorer, [i.sample for i in batch])
    ]


def _reference(config: RLConfig, run: Run) -> Any:
    """The frozen starting policy for the KL term (METHOD.md §6), whatever the run started from.

    With an adapter it lives inside the policy (``PolicyModel.reference``); a full fine-tune
    needs a second, frozen model loaded from ``config.model``. Which one is used is recorded in
    ``run.reference`` and saved with every checkpoint.
    """
    if not config.loss.kl_beta:
        run.reference = {"kind": "none", "model": str(config.model)}
        return None
    if run.policy.has_adapter:
        run.reference = {"kind": run.policy.reference_kind, "model": str(config.model)}
        return None
    from train.model import PolicyModel

    run.reference = {"kind": "frozen_copy", "model": str(config.model)}
    reference = PolicyModel(
        config.model, prompt=run.prompt, device=str(run.policy.device), dtype=config.learner.dtype
    )
    reference.model.requires_grad_(False)
    return reference


def _rollout_metrics(groups: Sequence[Group]) -> dict[str, Any]:
    """What the kept groups' rollouts did, including what the patch module changes: the samples
    trained at each step index (a rollout that stops at its first mismatch trains none after it),
    and how often a step after a rollout's first mismatch still matched (``after_mistake``)."""
    records = [s for _, rollouts in groups for r in rollouts for s in r.steps]
    if not records:
        return {
            "reward": 0.0,
            "match_rate": 0.0,
            "patch_rate": 0.0,
            "format_rate": 0.0,
            "rollout_steps": 0.0,
            "samples_at_step": [],
            "after_mistake": [0, 0],
        }
    rollouts = [r for _, rs in groups for r in rs]
    at_step = [0] * (1 + max(s.step for s in records))
    for record in records:
        at_step[record.step] += 1
    after = [s.matched for r in rollouts for i, s in enumerate(r.steps) if i > r.matched_steps]
    return {
        "samples_at_step": at_step,
        "after_mistake": [sum(after), len(after)],  # matched, steps
        "reward": sum(s.reward.reward for s in records) / len(records),
        "match_rate": sum(s.matched for s in records) / len(records),
        "patch_rate": sum(s.patched for s in records) / len(records),
        "format_rate": sum(s.reward.format_ok for s in records) / len(records),
        "rollout_steps": len(records) / len(rollouts),
        "expert_steps": sum(len(t.steps) for t, _ in groups) / len(groups),
    }


def train_rl(config: RLConfig, *, progress: bool = True) -> Path:
    """Run (or resume) semi-online RL; returns the run directory."""
    run = open_run(config)
    stream: Stream[ExpertTrajectory] = Stream(run.train, config.seed, run.position)
    engine = make_engine(config, run)
    roller = SemiOnlineRollout(engine, config.rollout, prompt=run.prompt, match=config.match)
    reference = _reference(config, run)
    log.info("KL reference: %s (%s)", run.reference["kind"] if run.reference else "none", config.model)
    steps_per_epoch = math.ceil(len(run.train) / config.tasks_per_step)
    total = min(config.epochs * steps_per_epoch, config.max_steps or 1 << 30)
    tracker = Tracker(run.dir, resume_after=run.step if run.step else None)
    bar = progress_bar(progress and run.is_main, total, run.step, "rl")
    started = time.perf_counter()
    try:
        while run.step < total:
            metrics = _one_step(
                config,
                run,
                stream,
                engine,
                roller,
                reference,
                phase=(lambda name: bar.set_description(f"rl: {name}")) if bar else (lambda _: None),
            )
            run.step += 1
            if out_of_time(started, config.max_seconds):
                total = run.step  # the time budget is spent: this step is the last (and saved)
            if config.eval_every and run.step % config.eval_every == 0 and run.val:
                result = sop(
                    engine,
                    run.val,
                    prompt=run.prompt,
                    match_settings=config.match,
                    max_new_tokens=config.rollout.max_new_tokens,
                )
                metrics.update({f"val_sop_{k}": result[k] for k in ("pg", "tsr", "score")})
            if run.is_main:
                tracker.log(run.step, metrics)
                _warn_if_nothing_learned(config, run.step, metrics)
            if run.step % config.save_every == 0 or run.step == total:
                save(config, run, stream.position, metrics, "semi-online-rl")
            if bar is not None:
                bar.set_description("rl")
                bar.update(1)
                bar.set_postfix(progress_fields(metrics))
    finally:
        if bar is not None:
            bar.close()
        tracker.close()
    return run.dir


def _warn_if_nothing_learned(config: RLConfig, step: int, metrics: dict[str, Any]) -> None:
    """Say so when a step could not learn anything, and what to change."""
    if not metrics["groups"]:
        log.warning(
            "step %d: dynamic sampling dropped all %d groups drawn (their rollouts did equally "
            "well), so nothing was learned; lower dynamic_sampling.eta or raise rollout.n",
            step,
            metrics["groups_dropped"],
        )
    if step == 1 and metrics["format_rate"] == 0 and config.rollout.reward == "paper":
        log.warning(
            "no sampled response had a non-empty think block: the paper-form reward gives "
            "every sample 0, so nothing is learned; train SFT with thoughts or set "
            "rollout.reward: code"
        )


def progress_fields(metrics: dict[str, Any]) -> dict[str, str]:
    """The progress line: enough to see a run with no signal (groups all dropped, nothing clipped,
    advantages near zero) at a glance."""
    return {
        "reward": f"{metrics['reward']:.3f}",
        "match": f"{metrics['match_rate']:.2f}",
        "kept": f"{metrics['groups']}/{metrics['groups'] + metrics['groups_dropped']}",
        "|A|": f"{metrics['abs_advantage']:.3f}",
        "clip": f"{metrics['clip_fraction']:.3f}",
        "kl": f"{metrics['kl']:.2e}",
    }


def _one_step(
    config: RLConfig,
    run: Run,
    stream: Stream[ExpertTrajectory],
    engine: RolloutEngine,
    roller: SemiOnlineRollout,
    reference: Any,
    phase: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """One RL step; ``phase`` hears each part as it starts (rollout, log-probs, update), for the bar."""
    if isinstance(engine, SeededEngine):
        engine.at_step(config.seed, run.step)
    elif hasattr(engine, "sync"):
        engine.sync(run.step)  # the vLLM engine loads the current weights
    t0 = time.perf_counter()
    phase("rollout")
    groups, dropped, drawn, spreads = _draw(config, roller, stream)
    t1 = time.perf_counter()
    items = _items(config, run, groups)
    padding_items = _items(config, run, dropped[-1:])[:1] if not items else []
    phase("old/ref log-probs")
    old_s = _old_and_reference(config, run, [*items, *padding_items], reference)
    t2 = time.perf_counter()
    random.Random(f"{config.seed}:{run.step}:shuffle").shuffle(items)
    batches = mini_batches(items, config.mini_batches, padding_items[0] if padding_items else None)
    phase("update")
    updates = [run.learner.ppo_update(batch, config.loss, entropy=config.log_entropy) for batch in batches]
    t3 = time.perf_counter()
    tokens = sum(u["tokens"] for u in updates)
    metrics: dict[str, Any] = {
        **_rollout_metrics(groups),
        "groups": len(groups),
        "groups_dropped": len(dropped),
        "samples": len(items),
        "abs_advantage": sum(abs(i.advantage) for i in items) / len(items) if items else 0.0,
        "kl": _mean(updates, "kl"),
        "pg_loss": _mean(updates, "pg_loss"),
        "clip_fraction": _mean(updates, "clip_fraction"),
        # Each update's own: the first of a step runs on the sampling weights (every ratio is 1, so
        # nothing clips there); how far the policy moves shows in the later ones.
        "clip_fractions": [u["clip_fraction"] for u in updates],
        "entropy": _mean(updates, "entropy"),
        "grad_norm": _mean(updates, "grad_norm"),
        "tokens": tokens,
        "rollout_s": t1 - t0,
        "old_logprob_s": old_s,
        "ref_logprob_s": t2 - t1 - old_s,
        "update_s": t3 - t2,
        "tokens_per_s": tokens / (t3 - t2) if t3 > t2 else 0.0,
        "tasks": drawn,
        "spreads": spreads,
    }
    return metrics


def _mean(updates: Sequence[dict[str, float]], key: str) -> float:
    return sum(u[key] for u in updates) / len(updates) if updates else 0.0
