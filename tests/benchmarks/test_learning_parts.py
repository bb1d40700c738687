"""The learning benchmark's own rules: disjoint splits, the calibration choices, the intervals."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.scripts import load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def learning() -> ModuleType:
    return load("learning.py")


@pytest.mark.parametrize("family", ["add_several_to_cart", "star_two_files", "favorite_contact"])
def test_splits_are_disjoint_and_held_out_combinations_are_never_trained(learning, family: str) -> None:  # type: ignore[no-untyped-def]
    seeds = {split: learning.split_seeds(family, split, 12) for split in ("initial", "train", "heldout")}
    assert not set(seeds["initial"]) & set(seeds["train"])
    assert not set(seeds["heldout"]) & (set(seeds["initial"]) | set(seeds["train"]))
    combos = {split: {learning._combo(family, s) for s in found} for split, found in seeds.items()}
    if family in learning.HISTORY:  # unseen combinations ...
        assert not combos["heldout"] & (combos["initial"] | combos["train"])
        # ... of items each trained in another combination
        trained_items = {v for c in combos["initial"] | combos["train"] for v in _values(c)}
        assert all(v in trained_items for c in combos["heldout"] for v in _values(c))


def _values(combo: str) -> set[str]:
    import json

    return {str(v) for v in json.loads(combo).values()}


def test_the_rl_arms_train_the_products_adapter_for_equal_updates(learning, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every RL arm: the nightly job's LoRA adapter at its rate (read from deploy/retrain.yaml), for
    the setting's updates (steps x mini-batches); the offline arm with the fixes its filter and its
    history need; SFT for as many updates."""
    from pieces import product_rl

    nightly = product_rl()
    setting = learning.Setting()
    assert setting.updates % setting.mini_batches == 0
    configs = {
        m: learning.rl_config(setting, tmp_path, tmp_path / m, 0, m, setting.updates, 0.3)
        for m in ("offline", "semi_eps1", "semi_epsinf")
    }
    for config in configs.values():
        assert config.optim.lr == nightly["optim"]["lr"]
        assert config.learner.lora.rank == nightly["learner"]["lora"]["rank"]
        assert config.max_steps * config.mini_batches == setting.updates
        assert config.max_seconds is None
    offline, semi = configs["offline"], configs["semi_eps1"]
    assert offline.rollout.history == "expert"
    assert offline.dynamic_sampling.signal == "any_step"
    assert offline.rollout.patch.mode == "off_policy_thought"
    assert semi.dynamic_sampling.signal == nightly.get("dynamic_sampling", {}).get("signal", "r0")
    assert semi.rollout.patch.threshold == 1
    assert configs["semi_epsinf"].rollout.patch.threshold == -1
    sft = learning.sft_config(setting, tmp_path, tmp_path / "sft", 0, "train", max_steps=setting.updates)
    assert sft.max_steps == setting.updates


def test_eta_is_lowered_only_when_the_papers_drops_most_groups_with_signal(learning) -> None:  # type: ignore[no-untyped-def]
    assert learning.choose_eta([0.0, 0.35, 0.4, 0.2]) == 0.3  # 2 of 3 live groups above 0.3
    assert learning.choose_eta([0.0, 0.15, 0.12, 0.4]) == 0.1  # 0.3 and 0.2 keep 1 of 3
    assert learning.choose_eta([]) == 0.3


def test_the_interval_is_paired_and_covers_the_mean(learning) -> None:  # type: ignore[no-untyped-def]
    same = {0: {"a": 1.0, "b": 0.0}, 1: {"a": 1.0, "b": 0.0}}
    mean, low, high = learning.bootstrap(same)
    assert (mean, low, high) == (0.5, 0.0, 1.0)
    better = {0: {"a": 0.2, "b": 0.2}, 1: {"a": 0.2, "b": 0.2}}
    assert learning.bootstrap(better) == pytest.approx((0.2, 0.2, 0.2))


def test_the_interval_resamples_families_not_their_correlated_instances(learning) -> None:  # type: ignore[no-untyped-def]
    # two families whose four held-out instances each pass or fail together
    together = {
        0: {f"sim:{f}:{i}": float(f == "wifi_on") for f in ("wifi_on", "star_file") for i in range(4)}
    }
    mean, low, high = learning.bootstrap(together)
    assert mean == 0.5
    assert (low, high) == (
        0.0,
        1.0,
    )  # two families: either may be drawn twice (eight instances would say ~0.25-0.75)


def _piece(arm: str, seed: int, solved: list[bool]) -> dict:  # type: ignore[type-arg]
    rows = {f"sim:wifi_on:{i}": [4 if ok else 1, 4] for i, ok in enumerate(solved)}
    split = {
        "per_trajectory": rows,
        "online": 0.0,
        "step_accuracy": 0.5,
        "grounding_accuracy": 0.5,
        "after_mistake": [1, 2],
    }
    training = {"updates": 4, "samples": 32, "seconds": 1.0}
    return {
        "arm": arm,
        "seed": seed,
        "lr": 1e-4,
        "eta": 0.3,
        "training": training,
        "evaluation": {"heldout": split, "control": split},
    }


@pytest.mark.parametrize(
    ("semi", "gate", "refuted"), [(4, True, True), (6, True, False), (10, True, False), (4, False, False)]
)
def test_the_refutation_rule(learning, semi: int, gate: bool, refuted: bool) -> None:  # type: ignore[no-untyped-def]
    """Refuted: the gate passed and the interval of (semi eps 1 - offline) in held-out TSR lies below +0.10."""
    offline = [i < 4 for i in range(20)]  # 4 of 20 held-out trajectories solved
    better = [i < semi for i in range(20)]
    pieces = [
        _piece(arm, seed, solved)
        for seed in (0, 1, 2)
        for arm, solved in (("offline", offline), ("semi_eps1", better))
    ]
    initial = {
        "passed": gate,
        "checks": [],
        "evaluation": {
            "heldout": {**pieces[0]["evaluation"]["heldout"], "tsr": 0.0, "pg": 0.0},
            "control": {"tsr": 0.0, "online": 0.0},
        },
    }
    verdict = learning.summarise(learning.QUICK, initial, pieces)["verdict"]
    assert verdict["refuted"] is refuted
    assert verdict["semi_eps1_minus_offline_tsr"][0] == pytest.approx((semi - 4) / 20)
