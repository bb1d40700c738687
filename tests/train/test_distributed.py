"""Several ranks: every rank runs the same number of optimiser steps and micro-batches even when
their rollouts gave them different numbers of samples (otherwise the gradient collectives of one
rank wait for, or read the wrong data of, another)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.train.conftest import RESIZE, clean_env, write_config
from train.learner import Item, mini_batches

pytestmark = pytest.mark.timeout(600)


def items(count: int, length: int = 5) -> list[Item]:
    return [Item(SimpleNamespace(response_len=length, tag=k), advantage=float(k)) for k in range(count)]  # type: ignore[arg-type]


def shape(batches: list[list[Item]]) -> list[list[float]]:
    return [[i.weight for i in batch] for batch in batches]


def test_one_rank_splits_into_the_configured_mini_batches_without_padding() -> None:
    assert shape(mini_batches(items(7), 4)) == [[1, 1], [1, 1], [1, 1], [1]]
    assert shape(mini_batches(items(3), 4)) == [[1], [1], [1]]  # an empty mini-batch is left out
    assert mini_batches([], 4) == []
    padded = Item(SimpleNamespace(response_len=5), advantage=1.0)  # type: ignore[arg-type]
    assert mini_batches([], 2, padded) == []  # alone, a rank with nothing to learn makes no step


def _rank(rank: int, port: int, counts: list[int], out: Any) -> None:
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    try:
        mine = items(counts[rank])
        filler = Item(SimpleNamespace(response_len=5, tag="filler"), advantage=2.0)  # type: ignore[arg-type]
        batches = mini_batches(mine, 4, filler)
        out.put(
            (
                rank,
                shape(batches),
                sum(i.tokens for b in batches for i in b),
                [getattr(i.sample, "tag", None) for b in batches for i in b if not i.weight],
            )
        )
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        # rank 0 splits 5 into [2, 2, 1, 0], rank 1 splits 2 into [1, 1, 0, 0]: three steps each.
        ((5, 2), {0: [[1, 1], [1, 1], [1]], 1: [[1, 0], [1, 0], [0]]}),
        # A rank whose groups were all dropped pads with the filler it was given.
        ((3, 0), {0: [[1], [1], [1]], 1: [[0], [0], [0]]}),
    ],
)
def test_ranks_with_different_sample_counts_get_the_same_steps(
    counts: tuple[int, int], expected: dict[int, list[list[float]]]
) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank, args=(port, list(counts), queue), nprocs=2, join=True)
    got = {}
    for _ in range(2):
        rank, batches, tokens, pads = queue.get()
        got[rank] = batches
        assert tokens == 5 * counts[rank]  # padding adds no tokens to the token-mean
        if counts[rank] == 0:
            assert set(pads) == {"filler"}
    assert got == expected


@pytest.mark.slow
def test_two_ranks_train_rl_on_trajectories_of_different_lengths(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A 2-step and a 10-step task, one per rank, unlimited patching: 4 vs. 20 samples over 8
    mini-batches, through torchrun and the DeepSpeed learner (gloo on CPU)."""
    config = write_config(
        tmp_path / "rl.yaml",
        {
            "model": str(tiny_model_dir),
            "output_dir": "run",
            "resize": RESIZE,
            "data": {
                "sources": [{"kind": "sim", "tasks": ["open_app", "add_labelled_alarm"]}],
                "val_fraction": 0.0,
            },
            "rollout": {"n": 2, "max_new_tokens": 24, "reward": "code", "patch": {"threshold": -1}},
            "dynamic_sampling": {"enabled": False},
            "learner": {"backend": "deepspeed"},
            "tasks_per_step": 1,
            "mini_batches": 8,
            "max_steps": 1,
            "save_every": 1,
            "eval_every": None,
        },
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bin_dir = Path(sys.executable).parent
    env = clean_env() | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            str(bin_dir / "torchrun"),
            "--nproc_per_node",
            "2",
            "--master_port",
            str(port),
            str(bin_dir / "uis1"),
            "train",
            "rl",
            "--config",
            str(config),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    run = tmp_path / "run"
    assert (run / "checkpoints" / "step-000001" / "state.pt").is_file()
    assert (run / "state-rank1-step-000001.pt").is_file()
    assert os.path.getsize(run / "metrics.jsonl") > 0
