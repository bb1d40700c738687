"""The RL sanity check's own rules: the product's rl stage as the arms' config, the gain and its interval."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.benchmarks.scripts import load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sanity() -> ModuleType:
    return load("rl_sanity.py")


def test_an_arm_is_the_products_rl_stage_with_the_listed_scalings_and_its_own_change(
    sanity, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    product = yaml.safe_load((REPO / "deploy" / "retrain.yaml").read_text())["rl"]
    data = {"sources": [{"kind": "sim", "tasks": ["wifi_on"], "seeds": [0]}], "val_fraction": 0.0}
    setting = sanity.Setting()
    config = sanity.stage_config(setting, "lora-1e-3-sample-mean", tmp_path, tmp_path / "rl", 3, data)
    # the product's own choices stay ...
    assert config.learner.lora.rank == product["learner"]["lora"]["rank"]
    assert config.learner.lora.alpha == product["learner"]["lora"]["alpha"]
    assert config.parent_version == "start"
    # ... the scalings are applied, each one listed ...
    assert config.learner.backend == "torch"
    assert config.learner.dtype == "float32"
    assert config.max_seconds is None
    assert config.max_steps == setting.rl_steps
    assert config.tasks_per_step == setting.tasks_per_step
    assert config.rollout.n == setting.n
    # ... and the arm's own change on top
    assert config.optim.lr == 1e-3
    assert config.loss.aggregation == "sample_mean"
    assert config.seed == 3
    control = sanity.stage_config(setting, "control", tmp_path, tmp_path / "rl", 0, data)
    assert control.optim.lr == 0.0
    assert control.learner.lora is not None
    nightly = sanity.stage_config(setting, "nightly", tmp_path, tmp_path / "rl", 0, data)
    assert nightly.optim.lr == product["optim"]["lr"]  # the file's own rate, whatever it is


def test_the_gain_is_arm_minus_control_per_instance_and_its_interval_covers_it(sanity) -> None:  # type: ignore[no-untyped-def]
    control = {"a": 0.25, "b": 0.5, "c": 0.0, "d": 0.75}
    shifted = {0: {k: v + 0.25 for k, v in control.items()}}
    assert sanity.bootstrap_gain(shifted, control) == pytest.approx((0.25, 0.25, 0.25))
    assert sanity.bootstrap_gain({0: control}, control) == (0.0, 0.0, 0.0)
    mixed = {0: {"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.75}}  # +0.75 on one instance, 0 elsewhere
    mean, low, high = sanity.bootstrap_gain(mixed, control)
    assert mean == pytest.approx(0.1875)
    assert low == pytest.approx(0.0)  # three instances in four gained nothing: draws of only those
    assert mean < high <= 0.75


def test_the_control_is_every_evaluation_of_the_unmoved_weights_pooled(sanity) -> None:  # type: ignore[no-untyped-def]
    def piece(*points: float) -> dict:  # type: ignore[type-arg]
        return {"curve": [{"scores": {"a": {"sampled": v}}} for v in points]}

    assert sanity.control_reference([piece(0.25, 0.5), piece(0.0)]) == {"a": pytest.approx(0.25)}


def test_the_detectable_gain_shrinks_with_instances_samples_and_seeds(sanity) -> None:  # type: ignore[no-untyped-def]
    one = sanity.detectable([0.5] * 12, k=8)
    # per instance 0.25 / 8 x (1 + 1) = 0.0625; over 12: sqrt(0.0625 / 12) = 0.0722; x 2.8 = 0.202
    assert one == pytest.approx(2.8 * math.sqrt(0.0625 / 12))
    assert sanity.detectable([0.5] * 48, k=8) == pytest.approx(one / 2)
    assert sanity.detectable([0.5] * 12, k=32) == pytest.approx(one / 2)
    assert sanity.detectable([0.5] * 12, k=8, seeds=4) == pytest.approx(one / 2)
    # a control evaluated many times leaves the arm's own noise: half the variance of one against one
    assert sanity.detectable([0.5] * 12, k=8, control_evals=10**9) == pytest.approx(one / math.sqrt(2))
