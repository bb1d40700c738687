"""Every split the project judges learning by holds out instances that really differ: no held-out
instance (demo rows, the retraining gate's, the benchmarks') has the goal and expert actions of one
that anything trained on (devices.sim.tasks.splits)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from devices.sim.tasks import splits
from tests.benchmarks.scripts import load


def _overlap(family: str, held: Iterable[int], trained: Iterable[int]) -> set[int]:
    seen = {splits.signature(family, s) for s in trained}
    return {s for s in held if splits.signature(family, s) in seen}


def test_the_demos_held_out_rows_and_gate_share_no_instance_with_its_training() -> None:
    from serve.demo.loop.setting import LoopSetting, retrain_config
    from train.online import OnlineSettings, cases

    setting = LoopSetting()
    config = retrain_config(setting, Path("data"), "sqlite://", Path("starter"))
    gate = cases(OnlineSettings.model_validate(config["evaluation"]["online"]))
    assert len(gate) == setting.gate_instances * len(setting.families)
    for family in setting.families:
        trained = [
            setting.demo_seed(family),
            *(setting.starter_seeds(family) if family in setting.known else []),
        ]
        held = setting.held_out_seeds(family)
        assert len(held) == setting.held_out_instances
        assert not _overlap(family, held, trained), family
        assert not _overlap(family, [seed for f, seed in gate if f == family], trained), family


@pytest.mark.parametrize("name", ["Setting", "QUICK", "GPU"])
def test_the_learning_benchmarks_held_out_split_shares_no_instance_with_its_training(name: str) -> None:
    learning = load("learning.py")
    setting = learning.Setting() if name == "Setting" else getattr(learning, name)
    by = {
        split: {s["tasks"][0]: s["seeds"] for s in learning.sources(setting, split)}
        for split in ("initial", "train", "heldout")
    }
    for family in setting.families:
        trained = by["initial"][family] + by["train"][family]
        assert not _overlap(family, by["heldout"][family], trained), family
