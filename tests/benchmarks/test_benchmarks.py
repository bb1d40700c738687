"""Each benchmark script runs from the checkout on a small setting and prints its figures.

These are not performance tests: nothing here checks a figure against a target (BENCHMARKS.md
holds the measured ones). They check that the scripts still run end to end and report what they
claim to (the machine, a table, JSON where asked), so the commands in BENCHMARKS.md stay true.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.progress import run_while_working

REPO = Path(__file__).resolve().parents[2]

# The last guard against a hang the progress check misses; a busy machine runs a benchmark slowly.
pytestmark = pytest.mark.timeout(4 * 3600)


def _run(script: str, *args: str) -> str:
    """The script's output; waited on while it works (a busy machine may take many times as long),
    failed when it hangs (``tests.progress``)."""
    result = run_while_working([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _json_tail(output: str) -> Any:
    return json.loads(output[output.index("\n{") + 1 :])


def test_devices_latency() -> None:
    output = _run("devices_latency.py", "--rounds", "2")
    assert "cores" in output
    assert "screenshot" in output


def test_screenshot_path() -> None:
    report = _json_tail(
        _run("screenshot_path.py", "--frames", "2", "--width", "540", "--height", "1200", "--json")
    )
    paths = {(r["screen"], r["path"]) for r in report["results"]}
    assert ("changing", "driver raw") in paths
    assert ("static", "adbutils screenshot()") in paths
    raw = next(r for r in report["results"] if r["path"] == "transfer only (raw)")
    assert raw["bytes"] == 540 * 1200 * 4 + 16  # header + RGBA pixels


def test_screens(tmp_path: Path) -> None:
    sheet = tmp_path / "screens.png"
    report = json.loads(_run("screens.py", "--image-tokens", "64", "--out", str(sheet), "--json"))
    assert "cores" in report["machine"]
    by_profile = {r["profile"]: r for r in report["profiles"]}
    assert by_profile["learnable"]["row_text_px"] > by_profile["standard"]["row_text_px"] * 1.5
    assert by_profile["standard"]["resized"] == "140x308"
    from PIL import Image

    with Image.open(sheet) as image:  # six screens of 140 px a row, as the model gets them
        assert image.width >= 6 * 140


def test_service_overhead() -> None:
    output = _run(
        "service_overhead.py",
        "--episodes",
        "1,3",
        "--steps",
        "3",
        "--policy-latency",
        "0.05",
        "--width",
        "540",
        "--height",
        "1200",
        "--image-transport",
        "original",
        "--json",
    )
    report = _json_tail(output)
    assert [r["episodes"] for r in report["rounds"]] == [1, 3]
    for result in report["rounds"]:
        assert result["statuses"] == {"succeeded": result["episodes"]}  # terminate on the last step
        assert result["steps"] == 3 * result["episodes"]
        assert result["policy_p50_ms"] >= 50  # the stand-in's fixed latency is policy time
        assert 0 <= result["overhead_share"] < 1


def test_train_step(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "train.json"
    _run(
        "train_step.py",
        "--steps",
        "2",
        "--tasks",
        "wifi_on",
        "--tasks-per-step",
        "1",
        "--n",
        "2",
        "--max-new-tokens",
        "8",
        "--quiet",
        "--micro-batch",
        "1",
        "2",
        "--json",
        str(out),
    )
    results = json.loads(out.read_text())
    for micro_batch in (1, 2):
        assert len(results[f"tiny/torch/{micro_batch}"]["steps"]) == 2
        assert results[f"tiny/torch/{micro_batch}"]["mean"]["steps_per_s"] > 0


def test_train_step_against_trl(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    out = tmp_path / "trl.json"
    output = _run(
        "train_step.py",
        "--trl",
        "--steps",
        "2",
        "--tasks",
        "wifi_on",
        "--tasks-per-step",
        "1",
        "--n",
        "2",
        "--max-new-tokens",
        "8",
        "--quiet",
        "--json",
        str(out),
    )
    assert "TRL GRPOTrainer" in output
    pair = json.loads(out.read_text())["tiny/single_turn"]
    # The same work both ways: 4 prompts (the steps of wifi_on) x 2 samples per step.
    assert [r["samples"] for r in pair["this"]["1"]["steps"]] == [8, 8]
    assert [r["samples"] for r in pair["trl"]["steps"]] == [8, 8]
    ratio = pair["trl"]["mean"]["step_s"] / pair["this"]["1"]["mean"]["step_s"]
    assert pair["ratio"]["1"] == pytest.approx(ratio)


@pytest.mark.slow
def test_learning(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "learning.json"
    arms = ("sft", "offline", "semi_eps1", "sft+semi")
    cache = str(tmp_path / "cache")
    output = _run(
        "learning.py",
        "--quick",
        "--seeds",
        "0",
        "--arms",
        *arms,
        "--jobs",  # the arms side by side, each piece its own process (as on a GPU)
        "2",
        "--quiet",
        "--cache",
        cache,
        "--json",
        str(out),
    )
    assert "held-out instances" in output
    assert "training signal" in output
    summary = json.loads(out.read_text())
    assert summary["initial"]["checks"]  # the gate was checked
    assert set(summary["arms"]) == {"sft", "offline", "semi_eps1", "sft+semi"}
    for arm, row in summary["arms"].items():
        assert row["seeds"] == [0]
        assert row["updates"] >= 1 or arm != "sft"  # trained until the budget was spent
        low, mean_, high = row["heldout_tsr"][1], row["heldout_tsr"][0], row["heldout_tsr"][2]
        assert 0 <= low <= mean_ <= high <= 1
    assert summary["verdict"]["seeds"] == [0]
    # The table's numbers as stated, recomputed from the cached pieces: held-out SOP TSR is the
    # share of held-out trajectories whose every step matched, and the verdict applies the rule.
    tsr = {}
    for path in (tmp_path / "cache").glob("*/arms/*.json"):
        piece = json.loads(path.read_text())
        rows = piece["evaluation"]["heldout"]["per_trajectory"].values()
        tsr[piece["arm"]] = sum(matched == steps for matched, steps in rows) / len(rows)
    for arm, row in summary["arms"].items():
        assert row["heldout_tsr"][0] == pytest.approx(tsr[arm]), arm
    verdict = summary["verdict"]
    difference = verdict["semi_eps1_minus_offline_tsr"]
    assert difference[0] == pytest.approx(tsr["semi_eps1"] - tsr["offline"])
    assert verdict["refuted"] == (verdict["gate_passed"] and difference[2] < 0.10)
    cached = sorted(p.name for p in (tmp_path / "cache").glob("*/arms/*.json"))
    assert cached == ["offline-seed0.json", "semi_eps1-seed0.json", "sft+semi-seed0.json", "sft-seed0.json"]
    piece = json.loads(next((tmp_path / "cache").glob("*/arms/sft-seed0.json")).read_text())
    held = piece["evaluation"]["heldout"]["per_trajectory"]
    assert {key.split(":")[1] for key in held} == {"open_app", "add_several_to_cart"}  # by family and seed
    # the table is assembled from the cache alone: nothing is trained again
    again = _run("learning.py", "table", "--quick", "--cache", cache)
    assert "sft+semi" in again
    assert "arm sft" not in again


def test_rl_sanity(tmp_path: Path) -> None:
    """The RL sanity check runs the product's rl stage (its adapter, scaled as printed) for equal
    steps per arm, with the lr-0 control's weights unmoved, and assembles its table from the cache."""
    pytest.importorskip("torch")
    cache, out = str(tmp_path / "cache"), tmp_path / "rl.json"
    common = ("--quick", "--quiet", "--cache", cache)
    output = _run("rl_sanity.py", *common, "--arms", "control", "lora-1e-3", "--json", str(out))
    assert "scaled for this machine: learner.backend = torch" in output
    assert "smallest gain the interval can detect" in output
    summary = json.loads(out.read_text())
    control, trained = summary["arms"]["control"], summary["arms"]["lora-1e-3"]
    assert control["kl"] == [0.0] * len(control["kl"])  # lr 0: the adapter never moves
    assert len(trained["reward"]) == len(control["reward"])  # equal steps
    gain = trained["gain"]
    assert gain["low"] <= gain["mean"] <= gain["high"]
    assert gain["shown"] == (gain["low"] > 0)
    piece = json.loads(next((tmp_path / "cache").glob("*/arms/lora-1e-3-seed0.json")).read_text())
    assert piece["config"]["learner"]["lora"]["rank"] == 64  # the product's adapter, not a full fine-tune
    assert piece["config"]["optim"]["lr"] == 1e-3
    again = _run("rl_sanity.py", "table", *common)  # from the cache: nothing trains again
    assert "| lora-1e-3 |" in again
    assert "arm lora-1e-3" not in again


@pytest.mark.slow
def test_nights(tmp_path: Path, sft_checkpoint: Path) -> None:
    """The loop as a user runs it, a night per arm: traffic through the API, the person's
    corrections, the product's own job (its stages), the gate, the swap, the held-out score; the
    table from the cache alone."""
    pytest.importorskip("torch")
    cache, out, figure = str(tmp_path / "cache"), tmp_path / "nights.json", tmp_path / "nights.png"
    common = ("--quick", "--quiet", "--cache", cache, "--starter", str(sft_checkpoint))
    arms = ("--arms", "nightly", "sft", "off")
    output = _run("nights.py", *common, *arms, "--json", str(out), "--figure", str(figure))
    assert "refutation rule (stated before the run)" in output
    assert "smallest gain" in output
    summary = json.loads(out.read_text())
    assert figure.stat().st_size > 10_000
    product = yaml.safe_load((REPO / "deploy" / "retrain.yaml").read_text())
    pieces = {
        p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "cache").glob("*/*-seed0/night-1.json")
    }
    assert set(pieces) == {"nightly-seed0", "sft-seed0"}  # retraining off runs no night
    assert pieces["nightly-seed0"]["stages"] == product["stages"]  # the product's own job
    assert pieces["sft-seed0"]["stages"] == ["sft"]
    for piece in pieces.values():
        assert piece["job"]["status"] == "succeeded", piece["job"]
        assert piece["state"] in ("promoted", "rejected")  # the service's gate took the candidate
        assert piece["promoted"] == (piece["candidate"] if piece["state"] == "promoted" else "starter")
        held = piece["held_out"]["per_instance"]
        assert len(held) == 2  # one held-out instance of each of the two families
        assert piece["held_out"]["success"] == pytest.approx(sum(held.values()) / len(held))
    for arm, row in summary["arms"].items():
        assert [n["night"] for n in row["nights"]] == [0, 1], arm
    last = summary["arms"]["nightly"]["nights"][-1]
    assert summary["verdict"].startswith("refuted" if last["gain"][1] <= 0 else "not refuted")
    again = _run("nights.py", "table", *common, *arms)  # from the cache: nothing runs again
    assert "nightly seed 0 night 1" not in again
    assert "Held-out success by night" in again


@pytest.mark.slow
def test_hotswap(tmp_path: Path, sft_checkpoint: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "hotswap.json"
    output = _run(
        "hotswap.py",
        *("--clients", "2", "--warmup-s", "1", "--settle-s", "1", "--json", str(out)),
        *("--sft", str(sft_checkpoint)),  # the session's: trained as the script would train it
    )
    results = json.loads(out.read_text())
    assert {r.get("path") for r in results} >= {"adapter", "staged", "in_place"}
    # What section 3 claims, whatever the machine's speed: every swap happened under load, not one
    # request failed, and the new version answered after each.
    *swaps, whole = results
    for swap in swaps:
        assert swap["requests_during"] > 0, swap
        assert swap["failed_during"] == 0, swap
        assert swap["new_version_serving_after_s"] is not None, swap
    assert whole["requests"] > 0
    assert whole["failed"] == 0
    assert "whole run" in output


def test_nightly_estimate() -> None:
    full = json.loads(_run("nightly.py", "--json"))
    prompt = full["estimates"][0]["prompt"]
    assert prompt["image_tokens_per_screenshot"] == 3354  # 1080x2400 at the paper's limit: 39 x 86
    h100 = full["estimates"][0]["rl"]
    assert h100["epoch_h"] == pytest.approx(
        h100["rollout_prefill_h"] + h100["rollout_decode_h"] + h100["update_h"]
    )
    assert h100["total_h"] == pytest.approx(5 * h100["epoch_h"])
    lean = json.loads(_run("nightly.py", "--json", "--lora", "--max-pixels", "1003520"))
    assert lean["estimates"][0]["prompt"]["image_tokens_per_screenshot"] < 3354 / 2
    assert lean["estimates"][0]["rl"]["total_h"] < h100["total_h"] / 2


def test_faults() -> None:
    found = _json_tail(_run("faults.py", "--policy-timeout", "2", "--json"))
    assert found["hung_task"]["status"] == "error"
    assert "deadline" in found["hung_task"]["error"]
    assert found["readyz"]["status"] == 503
    assert found["big_predict"]["status"] == 413  # over the request's pixel budget
    assert found["budget_predict"]["status"] == 502  # decoded, sent on, the policy never answers
    assert found["big_body_no_key"]["status"] == "401"
    assert "cpus" in found["machine"]


def test_generation(tmp_path: Path) -> None:
    out = tmp_path / "generation.json"
    _run(
        "generation.py",
        *(
            "--model-size",
            "tiny",
            "--prompts",
            "3",
            "--repeats",
            "1",
            "--max-new-tokens",
            "8",
            "--json",
            str(out),
        ),
    )
    report = json.loads(out.read_text())
    assert "cpus" in report["machine"]
    assert report["tiny"]["tokens_written"] > 0
    assert report["tiny"]["same_tokens"] is True  # batched and one at a time wrote the same tokens


@pytest.mark.slow
def test_starter_probe(tmp_path: Path, sft_checkpoint: Path) -> None:
    """Per family and side, the teacher-forced loss, the greedy match and the screen's effect."""
    pytest.importorskip("torch")
    out = tmp_path / "probe.json"
    args = ("--checkpoint", str(sft_checkpoint), "--families", "wifi_on", "--trained", "2", "--held-out", "1")
    output = _run("starter_probe.py", *args, "--threads", "1", "--json", str(out))
    assert "cores" in output
    report = json.loads(out.read_text())
    for side, instances in (("trained", 2), ("held_out", 1)):
        row = report[side]["wifi_on"]
        assert row["steps"] >= 3 * instances  # Settings, the Network row, the Wi-Fi row, done: per instance
        assert 0 <= row["greedy_equal"] <= 1
        assert row["loss_per_token"] > 0
        assert row["worst_token"] >= row["loss_per_token"]
