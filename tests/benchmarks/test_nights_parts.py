"""The nights benchmark's own rules: the product's job as each arm's config, traffic that never
contains a held-out instance, and the refutation rule applied to the cached nights."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml

from devices.sim.tasks import splits
from tests.benchmarks.scripts import load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nights() -> ModuleType:
    return load("nights.py")


def test_the_nightly_arm_is_the_products_job_with_only_the_listed_scalings(nights, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from train.config import RetrainConfig

    product = yaml.safe_load((REPO / "deploy" / "retrain.yaml").read_text())
    setting = nights.Setting()
    config = nights.retrain_config(setting, "nightly", 2, tmp_path, "sqlite://", tmp_path / "starter")
    RetrainConfig.model_validate({k: v for k, v in config.items() if k != "kind"})  # what the job reads
    assert config["stages"] == product["stages"]
    assert config["rl"]["optim"] == product["rl"]["optim"]
    assert config["rl"]["learner"]["lora"] == product["rl"]["learner"]["lora"]
    assert config["rl"]["learner"]["backend"] == "torch"  # a listed scaling
    assert config["rl"]["seed"] == 2
    assert config["min_new_episodes"] == 1
    # Everything else the product sets is kept, or changed by a listed scaling or a size of the setting.
    sized = {
        "seed",
        "tasks_per_step",
        "mini_batches",
        "max_steps",
        "save_every",
        "rollout",
        "dynamic_sampling",
    }
    listed = {key.split(".", 1)[1].split(".")[0] for key in nights.SCALING if key.startswith("rl.")}
    for key, value in product["rl"].items():
        assert key in sized | listed or config["rl"][key] == value, key
    assert nights.retrain_config(setting, "sft", 0, tmp_path, "sqlite://", tmp_path)["stages"] == ["sft"]
    assert nights.retrain_config(setting, "sft+rl", 0, tmp_path, "sqlite://", tmp_path)["stages"] == [
        "sft",
        "rl",
    ]
    gate = config["evaluation"]["online"]
    assert gate["held_out"] == setting.gate_instances


def test_no_nights_traffic_has_a_held_out_instance_and_every_night_is_new(nights) -> None:  # type: ignore[no-untyped-def]
    setting = nights.Setting()
    for family in setting.families:
        held = {splits.signature(family, s) for s in nights.held_out_seeds(setting, family)}
        assert len(nights.held_out_seeds(setting, family)) == setting.held_out
        seen: set[int] = set()
        for seed in (0, 1, 2):
            for night in range(1, setting.nights + 1):
                traffic = nights.traffic_seeds(setting, family, seed, night)
                assert not set(traffic) & seen
                seen |= set(traffic)
                assert not {splits.signature(family, s) for s in traffic} & held, family


def _cache(nights, home: Path, per_night: dict[int, float], starter: float, instances: int = 20) -> None:  # type: ignore[no-untyped-def]
    """Fake cached pieces: the starter succeeds on a share ``starter`` of the instances; night k on
    ``per_night[k]`` (the first instances of the list)."""
    ids = [f"wifi_on:{i}" for i in range(instances)]

    def share(p: float) -> dict[str, bool]:
        return {i: n < round(p * instances) for n, i in enumerate(ids)}

    nights.write_json(home / "starter-eval.json", {"success": starter, "per_instance": share(starter)})
    for seed in (0, 1):
        for night, p in per_night.items():
            nights.write_json(
                home / f"nightly-seed{seed}" / f"night-{night}.json",
                {"held_out": {"per_instance": share(p)}, "seconds": 10.0, "state": "promoted"},
            )


def test_the_verdict_applies_the_rule_stated_before_the_run(nights, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    setting = nights.replace(nights.Setting(), nights=2)
    better = nights.Bench(setting, tmp_path / "a")
    _cache(nights, better.home, {1: 0.4, 2: 0.7}, starter=0.2)
    summary = nights.summarise(better, ["nightly", "off"], [0, 1])
    last = summary["arms"]["nightly"]["nights"][-1]
    assert last["success"] == pytest.approx(0.7)
    assert last["gain"][0] == pytest.approx(0.5)
    assert last["gain"][1] > 0
    assert summary["arms"]["off"]["nights"][-1]["success"] == pytest.approx(0.2)
    assert summary["verdict"].startswith("not refuted")
    same = nights.Bench(setting, tmp_path / "b")
    _cache(nights, same.home, {1: 0.2, 2: 0.2}, starter=0.2)
    assert nights.summarise(same, ["nightly", "off"], [0, 1])["verdict"].startswith("refuted")
    short = nights.Bench(nights.replace(setting, nights=3), tmp_path / "a")
    short.home = better.home
    assert nights.summarise(short, ["nightly", "off"], [0, 1])["verdict"] == "not run to the last night yet"
