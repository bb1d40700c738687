"""The learner: one interface, two engines (DESIGN.md's ``Learner``).

``TorchLearner`` is plain PyTorch with AdamW, for CPU runs and single GPUs. ``DeepSpeedLearner``
wraps the same model in a DeepSpeed engine (ZeRO stage 0-3, bf16, optimizer offload), the engine
for GPU nodes, launched by ``deepspeed`` or ``torchrun`` across nodes; on a machine without an
accelerator DeepSpeed picks its CPU accelerator and the gloo backend, which is how CI exercises it.

An update is one optimiser step over a mini-batch of items, run one item (micro-batch) at a time
with gradients accumulated; losses are token-means over the whole mini-batch, summed over ranks.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from train.batching import chunks, logprobs_batch
from train.config import LearnerSettings, OptimSettings
from train.loss import LossSettings, policy_loss, sft_loss
from train.model import PolicyModel, Sample


@dataclass
class Item:
    """One response to learn from: its tokens, advantage and the log-probs it was sampled under."""

    sample: Sample
    advantage: float = 0.0
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    weight: float = 1.0  # 0 for the padding that keeps ranks in step (it adds no gradient and no tokens)

    @property
    def tokens(self) -> int:
        return self.sample.response_len if self.weight else 0


def world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) without torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _global_sum(value: float) -> float:
    if world()[1] == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(tensor)
    return float(tensor[0])


def _global_max(values: Sequence[int]) -> list[int]:
    if world()[1] == 1:
        return list(values)
    tensor = torch.tensor(list(values), dtype=torch.int64)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return [int(v) for v in tensor]


def out_of_time(started: float, max_seconds: float | None) -> bool:
    """Whether a run's time budget (seconds since ``started``) is spent, decided alike on every
    rank: one rank stopping alone would leave the others waiting in a collective."""
    if max_seconds is None:
        return False
    spent = time.perf_counter() - started >= max_seconds
    return bool(_global_max([int(spent)])[0])


def mini_batches(items: Sequence[Item], count: int, padding: Item | None = None) -> list[list[Item]]:
    """``count`` mini-batches of this rank's items, each padded to the longest that any rank has.

    Every rank must run the same number of optimiser steps and micro-batches, or the gradient
    collectives of one rank wait forever for another's; ranks draw different numbers of samples
    (rollouts end early, dynamic sampling drops groups). Padding repeats a real sample with weight
    0. A mini-batch that is empty on every rank is left out everywhere. ``padding`` pads a rank that
    has no items of its own (all its groups dropped).
    """
    per = max(1, math.ceil(len(items) / count)) if items else 0
    chunks = [list(items[i * per : (i + 1) * per]) for i in range(count)]
    sizes = _global_max([len(c) for c in chunks])
    pad = items[0] if items else padding
    batches = []
    for chunk, size in zip(chunks, sizes, strict=True):
        if not size:
            continue
        if len(chunk) < size:
            if pad is None:
                raise RuntimeError("this rank has no sample to pad its mini-batches with")
            chunk += [replace(pad, weight=0.0) for _ in range(size - len(chunk))]
        batches.append(chunk)
    return batches


def _denominator(items: Sequence[Item], settings: LossSettings) -> Callable[[Item], int]:
    """What each item's summed token loss is divided by, over every rank's share of the
    mini-batch: its token count (token-mean), or its own length times the sample count."""
    if settings.aggregation == "token_mean":
        total = int(_global_sum(float(sum(i.tokens for i in items))))
        return lambda item: total
    samples = int(_global_sum(float(sum(1 for i in items if i.weight))))
    return lambda item: max(item.sample.response_len, 1) * max(samples, 1)


class Learner(Protocol):
    policy: PolicyModel

    def ppo_update(
        self, items: Sequence[Item], settings: LossSettings, *, entropy: bool = False
    ) -> dict[str, float]: ...
    def sft_update(self, items: Sequence[Item]) -> dict[str, float]: ...
    def optimizer_state(self) -> dict[str, Any]: ...
    def load_optimizer_state(self, state: dict[str, Any]) -> None: ...


class _Updates:
    """The accumulation loop both engines share; they differ in backward() and step()."""

    policy: PolicyModel
    micro_batch: int = 1  # samples per forward and backward (``LearnerSettings.micro_batch``)

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        raise NotImplementedError

    def _step(self) -> float:
        raise NotImplementedError

    def ppo_update(
        self, items: Sequence[Item], settings: LossSettings, *, entropy: bool = False
    ) -> dict[str, float]:
        """One optimiser step over ``items``: a forward and backward per micro-batch of them."""
        self.policy.model.train()
        denominator = _denominator(items, settings)
        sums = {"pg_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio": 0.0, "entropy": 0.0}
        batches = chunks(items, self.micro_batch)
        for k, batch in enumerate(batches):
            scored = logprobs_batch(self.policy, [item.sample for item in batch], entropy=entropy)
            loss = torch.zeros((), device=self.policy.device)
            for item, (logp, ent) in zip(batch, scored, strict=True):
                old = item.old_logp if item.old_logp is not None else logp.detach()
                adv = torch.full_like(logp, item.advantage)
                parts = policy_loss(
                    logp[None],
                    old[None],
                    adv[None],
                    torch.ones_like(logp)[None],
                    total_tokens=denominator(item),
                    ref_logp=None if item.ref_logp is None else item.ref_logp[None],
                    settings=settings,
                )
                loss = loss + parts.loss * item.weight
                if not item.weight:
                    continue
                n = parts.tokens
                sums["pg_loss"] += parts.pg_loss
                sums["kl"] += parts.kl
                sums["clip_fraction"] += parts.clip_fraction * n
                sums["ratio"] += parts.ratio_mean * n
                if ent is not None:
                    sums["entropy"] += float(ent.sum())
            self._backward(loss, k == len(batches) - 1)
        grad_norm = self._step()
        tokens = max(sum(i.tokens for i in items), 1)
        return {
            "pg_loss": sums["pg_loss"],
            "kl": sums["kl"],
            "clip_fraction": sums["clip_fraction"] / tokens,
            "ratio": sums["ratio"] / tokens,
            "entropy": sums["entropy"] / tokens,
            "grad_norm": grad_norm,
            "tokens": float(sum(i.tokens for i in items)),
        }

    def sft_update(self, items: Sequence[Item]) -> dict[str, float]:
        self.policy.model.train()
        total = int(_global_sum(float(sum(i.tokens for i in items))))
        loss_sum = 0.0
        batches = chunks(items, self.micro_batch)
        for k, batch in enumerate(batches):
            scored = logprobs_batch(self.policy, [item.sample for item in batch])
            loss = sum(
                (
                    sft_loss(logp[None], torch.ones_like(logp)[None], total_tokens=total) * item.weight
                    for item, (logp, _) in zip(batch, scored, strict=True)
                ),
                start=torch.zeros((), device=self.policy.device),
            )
            self._backward(loss, k == len(batches) - 1)
            loss_sum += float(loss.detach())
        grad_norm = self._step()
        return {
            "loss": loss_sum,
            "grad_norm": grad_norm,
            "tokens": float(sum(i.tokens for i in items)),
        }


def _adamw(policy: PolicyModel, optim: OptimSettings) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        list(policy.parameters()), lr=optim.lr, weight_decay=optim.weight_decay, betas=optim.betas
    )


class TorchLearner(_Updates):
    def __init__(self, policy: PolicyModel, optim: OptimSettings) -> None:
        self.policy = policy
        self.settings = optim
        self.optimizer = _adamw(policy, optim)
        self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()  # type: ignore[no-untyped-call]

    def _step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(list(self.policy.parameters()), self.settings.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def optimizer_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def init_distributed(device: torch.device) -> None:
    """Join the launcher's process group, or make a group of one when run directly."""
    if torch.distributed.is_initialized():
        return
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        from devices.ports import free_port

        os.environ["MASTER_PORT"] = str(free_port())
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")


class DeepSpeedLearner(_Updates):
    def __init__(self, policy: PolicyModel, optim: OptimSettings, settings: LearnerSettings) -> None:
        import deepspeed

        self.policy = policy
        init_distributed(policy.device)
        ds = settings.deepspeed
        bf16 = ds.bf16 == "on" or (ds.bf16 == "auto" and policy.device.type == "cuda")
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,  # accumulation is ours: boundaries are set per update
            "gradient_clipping": optim.grad_clip,
            "zero_optimization": {"stage": ds.zero_stage},
            "bf16": {"enabled": bf16},
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }
        if ds.offload_optimizer:
            config["zero_optimization"]["offload_optimizer"] = {
                "device": "cpu",
                "pin_memory": policy.device.type == "cuda",
            }
            config["optimizer"] = {
                "type": "AdamW",
                "params": {"lr": optim.lr, "weight_decay": optim.weight_decay, "betas": list(optim.betas)},
            }
            optimizer = None
        else:
            optimizer = _adamw(policy, optim)  # a client optimizer: no JIT-compiled op needed
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=policy.model, optimizer=optimizer, model_parameters=list(policy.parameters()), config=config
        )

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss)

    def _step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def optimizer_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def make_learner(policy: PolicyModel, optim: OptimSettings, settings: LearnerSettings) -> Learner:
    learner: DeepSpeedLearner | TorchLearner = (
        DeepSpeedLearner(policy, optim, settings)
        if settings.backend == "deepspeed"
        else TorchLearner(policy, optim)
    )
    learner.micro_batch = settings.micro_batch
    return learner


def save_state(path: Path, learner: Learner, extra: dict[str, Any]) -> None:
    """Optimizer state, RNG states and the loop's position, for a resume with identical data order."""
    import random

    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        **learner.optimizer_state(),
        **extra,
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-write leaves the previous state


def load_state(path: Path, learner: Learner) -> dict[str, Any]:
    import random

    import numpy as np

    state: dict[str, Any] = torch.load(path, weights_only=False)
    learner.load_optimizer_state(state)
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    return state
