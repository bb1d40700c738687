"""SFT -> semi-online RL -> SOP evaluation on the tiny model and simulated-phone expert data, from
the command line, with both learners, and a resume after the process is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.progress import wait_while_working
from tests.train.conftest import RESIZE, SIM_DATA, clean_env, metrics, uis1, write_config

pytestmark = pytest.mark.timeout(900)


def rl_body(model: Path, **overrides: Any) -> dict[str, Any]:
    body = {
        "model": str(model),
        "output_dir": "run",
        "seed": 3,
        "data": SIM_DATA,
        "resize": RESIZE,
        "rollout": {"n": 4, "max_new_tokens": 72, "temperature": 1.0},
        "tasks_per_step": 2,
        "max_steps": 3,
        "save_every": 1,
        "eval_every": None,
        "dynamic_sampling": {"enabled": False},
        "optim": {"lr": 1e-4},
    }
    body.update(overrides)
    return body


def test_the_trainer_scores_tokens_exactly_as_generation_produced_them(sft_checkpoint: Path) -> None:
    """The training forward pass and sampling must see the same model (3-D positions included)."""
    from PIL import Image

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings, build_conversation
    from train.model import PolicyModel

    policy = PolicyModel(sft_checkpoint, prompt=PromptSettings(resize=ResizeSettings(**RESIZE)))
    turns = build_conversation(
        "Turn on Wi-Fi", [Image.new("RGB", (360, 800), (90, 20, 20))], [], policy.prompt
    )
    inputs = policy.encode_prompt(turns)
    out = policy.model.generate(
        **inputs,
        max_new_tokens=12,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
        suppress_tokens=policy.suppress,
    )
    generated = out.sequences[0, inputs["input_ids"].shape[1] :]
    expected = torch.stack([s[0].log_softmax(-1)[t] for s, t in zip(out.scores, generated, strict=True)])
    with torch.no_grad():
        got, _ = policy.logprobs(policy.sample(turns, generated))
    assert torch.allclose(got, expected, rtol=2e-3, atol=2e-3)  # cached vs. full attention: float noise only


def test_sft_then_semi_online_rl_then_sop_from_the_command_line(
    sft_run: Path, sft_checkpoint: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    sft = metrics(sft_run)
    assert len(sft) == 60
    assert sft[-1]["loss"] < sft[0]["loss"] / 10  # it learned the expert responses
    record = json.loads((sft_checkpoint / "run.json").read_text())
    assert record["method"] == "sft"
    assert record["manifest_sha256"] == json.loads((sft_run / "manifest.json").read_text())["sha256"]

    rl = write_config(tmp_path / "rl.yaml", rl_body(sft_checkpoint))
    shown = uis1("train", "rl", "--config", str(rl)).stderr
    run = tmp_path / "run"
    steps = metrics(run)
    assert [m["step"] for m in steps] == [1, 2, 3]
    for key in (
        "reward",
        "match_rate",
        "patch_rate",
        "kl",
        "clip_fraction",
        "entropy",
        "tokens_per_s",
        "rollout_s",
        "old_logprob_s",
        "ref_logprob_s",
        "update_s",
        "groups",
        "groups_dropped",
        "abs_advantage",
    ):
        assert key in steps[0], key
    # The progress line shows whether the step had any signal: groups kept of drawn, |A|, clipping, KL.
    last = steps[-1]
    assert f"kept={last['groups']}/{last['groups'] + last['groups_dropped']}" in shown
    assert f"|A|={last['abs_advantage']:.3f}" in shown
    assert "clip=" in shown
    assert "kl=" in shown
    assert any(m["reward"] > 0.1 for m in steps)  # the SFT policy matches some expert steps
    assert steps[-1]["kl"] > 0  # and moved away from its reference
    assert (run / "tensorboard").is_dir()
    final = run / "checkpoints" / "step-000003"
    assert json.loads((final / "run.json").read_text())["method"] == "semi-online-rl"

    evaluation = write_config(
        tmp_path / "eval.yaml",
        {"model": str(final), "data": SIM_DATA, "split": "all", "resize": RESIZE, "max_new_tokens": 72},
    )
    ran = uis1("train", "eval", "--config", str(evaluation))
    assert "sop.score" in ran.stdout
    trajectories = len(json.loads((final / "eval.json").read_text())["sop"]["per_trajectory"])
    for bar in ("eval: sop", "eval: steps"):  # a bar on stderr per pass over the tasks
        assert f"{bar}: 100%" in ran.stderr, ran.stderr[-500:]
    assert f"{trajectories}/{trajectories}" in ran.stderr
    results = json.loads((final / "eval.json").read_text())
    assert 0 < results["sop"]["pg"] <= 1
    assert results["steps"]["type_match"] > 0.5
    base = write_config(
        tmp_path / "base.yaml",
        {
            "model": str(tiny_model_dir),
            "data": SIM_DATA,
            "split": "all",
            "resize": RESIZE,
            "max_new_tokens": 72,
            "metrics": ["sop"],
            "output": str(tmp_path / "base.json"),
        },
    )
    assert "eval: sop" not in uis1("train", "eval", "--config", str(base), "--quiet").stderr
    assert json.loads((tmp_path / "base.json").read_text())["sop"]["pg"] < results["sop"]["pg"]


def test_the_deepspeed_learner_makes_the_same_update_as_the_plain_torch_one(sft_checkpoint: Path) -> None:
    from PIL import Image

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings, build_conversation
    from train.config import LearnerSettings, OptimSettings
    from train.learner import DeepSpeedLearner, Item, TorchLearner
    from train.loss import LossSettings
    from train.model import PolicyModel

    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    turns = build_conversation("Turn on Wi-Fi", [Image.new("RGB", (360, 800), (10, 90, 20))], [], prompt)
    response = '<think>\nopen settings\n</think>\n<action>\n{"action": "open", "text": "Settings"}\n</action>'
    optim = OptimSettings(lr=1e-3)
    after = []
    for make in (
        lambda p: TorchLearner(p, optim),
        lambda p: DeepSpeedLearner(p, optim, LearnerSettings(backend="deepspeed")),
    ):
        policy = PolicyModel(sft_checkpoint, prompt=prompt)
        learner = make(policy)
        items = [Item(policy.sample(turns, response), advantage=a) for a in (1.0, -0.5)]
        with torch.no_grad():
            for item in items:
                item.old_logp = policy.logprobs(item.sample)[0]
        learner.ppo_update(items, LossSettings(kl_beta=0.0))
        after.append(torch.cat([p.detach().flatten() for p in policy.model.parameters()]))
    start = torch.cat(
        [p.detach().flatten() for p in PolicyModel(sft_checkpoint, prompt=prompt).model.parameters()]
    )
    assert not torch.equal(after[0], start)
    assert torch.allclose(after[0], after[1], atol=1e-6)


def test_rl_with_deepspeed_from_the_command_line(sft_checkpoint: Path, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "rl.yaml",
        rl_body(
            sft_checkpoint, max_steps=2, learner={"backend": "deepspeed", "deepspeed": {"zero_stage": 2}}
        ),
    )
    uis1("train", "rl", "--config", str(config), "--quiet")
    steps = metrics(tmp_path / "run")
    assert [m["step"] for m in steps] == [1, 2]
    assert steps[-1]["grad_norm"] > 0
    assert (tmp_path / "run" / "checkpoints" / "step-000002" / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_killed_rl_run_resumes_with_the_same_data_order_and_results(
    sft_checkpoint: Path, tmp_path: Path
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for where in (whole, killed):
        where.mkdir()
        write_config(where / "rl.yaml", rl_body(sft_checkpoint, max_steps=4))
    uis1("train", "rl", "--config", str(whole / "rl.yaml"), "--quiet")

    command = [
        str(Path(sys.executable).parent / "uis1"),
        "train",
        "rl",
        "--config",
        str(killed / "rl.yaml"),
        "--quiet",
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=clean_env()
    )
    # Killed once step 2 is saved, however long a busy machine takes to get there (a hang fails).
    wait_while_working(process, (killed / "run" / "checkpoints" / "step-000002").is_dir)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    uis1("train", "rl", "--config", str(killed / "rl.yaml"), "--quiet")

    a, b = metrics(whole / "run"), metrics(killed / "run")
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    for x, y in zip(a, b, strict=True):
        assert x["tasks"] == y["tasks"]  # the same trajectories, in the same order
        assert x["reward"] == pytest.approx(y["reward"])  # and the same samples
        assert x["pg_loss"] == pytest.approx(y["pg_loss"], abs=1e-6)


def test_a_time_budget_ends_sft_and_rl_after_the_step_that_spends_it(
    tiny_model_dir: Path, sft_checkpoint: Path, tmp_path: Path
) -> None:
    from train.config import RLConfig, SFTConfig
    from train.rl import train_rl
    from train.sft import train_sft

    common = {"data": SIM_DATA, "resize": RESIZE, "max_steps": 50, "max_seconds": 0.01, "save_every": 1000}
    sft = train_sft(
        SFTConfig.model_validate(
            {"model": tiny_model_dir, "output_dir": tmp_path / "sft", "batch_size": 2, **common}
        ),
        progress=False,
    )
    body = rl_body(sft_checkpoint, output_dir=tmp_path / "rl", **common)
    rl = train_rl(RLConfig.model_validate(body), progress=False)
    for run in (sft, rl):
        assert [m["step"] for m in metrics(run)] == [1]  # 50 steps allowed, the budget ran out in the first
        assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000001"]  # and the last is saved


def test_sft_stops_after_the_save_whose_check_says_so(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``after_save`` sees each saved step; a true answer ends the run there (the learning benchmark's
    gate checks stop its initial model's SFT this way)."""
    from train.config import SFTConfig
    from train.sft import train_sft

    seen: list[int] = []

    def check(step: int) -> bool:
        seen.append(step)
        return step == 4

    config = SFTConfig.model_validate(
        {
            "model": tiny_model_dir,
            "output_dir": tmp_path / "sft",
            "data": SIM_DATA,
            "resize": RESIZE,
            "batch_size": 1,
            "max_steps": 10,
            "save_every": 2,
        }
    )
    run = train_sft(config, progress=False, after_save=check)
    assert seen == [2, 4]
    assert [m["step"] for m in metrics(run)] == [1, 2, 3, 4]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000004"]


def test_sft_examples_from_the_image_cache_are_the_examples_built_from_the_screenshots(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Every example, in a second pass too (all from the cache), has the tokens and pixels it has when
    its screenshots are decoded and resized afresh (``image_limit`` 2: older screens left out)."""
    from agent.geometry import ScreenGeometry
    from agent.prompt import build_conversation
    from train.config import SFTConfig
    from train.rollout import expert_response
    from train.runs import open_run
    from train.sft import Example, _item, image_cache

    config = SFTConfig.model_validate(
        {"model": tiny_model_dir, "output_dir": tmp_path / "sft", "data": SIM_DATA, "resize": RESIZE}
    )
    run = open_run(config)
    assert run.prompt.image_limit == 2
    examples = [Example(t, i, k) for k, t in enumerate(run.train) for i in range(len(t.steps))]
    assert max(e.step for e in examples) >= 2  # some example leaves a screen out
    images = image_cache(run)
    for _ in range(2):
        for example in examples:
            steps = example.trajectory.steps[: example.step + 1]
            responses = [
                expert_response(
                    s, ScreenGeometry.for_screen(s.size, run.prompt.resize).resized, s.thought or ""
                )
                for s in steps
            ]
            turns = build_conversation(
                example.trajectory.goal, [s.screenshot() for s in steps], responses[:-1], run.prompt
            )
            fresh = run.policy.sample(turns, responses[-1])
            cached = _item(run, example, True, images).sample
            assert torch.equal(cached.prompt_ids, fresh.prompt_ids)
            assert torch.equal(cached.response_ids, fresh.response_ids)
            assert cached.pixel_values is not None
            assert fresh.pixel_values is not None
            assert torch.equal(cached.pixel_values, fresh.pixel_values)
    assert images.cache_info().hits > len(examples)  # the second pass came from the cache


def _adapter_unlike_its_base(tiny_model_dir: Path, out: Path) -> Path:
    """An adapter checkpoint (as SFT with LoRA saves one) whose policy differs from its base."""
    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings
    from train.checkpoints import save_checkpoint
    from train.model import LoraSettings, PolicyModel

    policy = PolicyModel(
        tiny_model_dir, lora=LoraSettings(rank=4), prompt=PromptSettings(resize=ResizeSettings(**RESIZE))
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero (adapter = base); trained adapters are not
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return save_checkpoint(out, 1, policy, {"method": "sft"})


def test_rl_from_an_adapter_measures_kl_to_that_adapter_also_after_a_resume(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """METHOD.md §6: the KL reference is the policy the run started from. With lr 0 the policy never
    moves, so the KL must be 0 at every step; against the base before the adapter it is not."""
    from train.checkpoints import read_record
    from train.config import RLConfig
    from train.rl import train_rl

    start = _adapter_unlike_its_base(tiny_model_dir, tmp_path / "sft")
    body = rl_body(start, output_dir=tmp_path / "rl", optim={"lr": 0.0}, max_steps=1)
    run = train_rl(RLConfig.model_validate(body), progress=False)
    train_rl(RLConfig.model_validate({**body, "max_steps": 2}), progress=True)  # resumes at step 1
    bar = capsys.readouterr().err  # the bar says which part of the step is running
    assert all(f"rl: {part}" in bar for part in ("rollout", "old/ref log-probs", "update")), bar

    steps = metrics(run)
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["samples"] > 0 for m in steps)
    assert [m["kl"] for m in steps] == pytest.approx([0.0, 0.0], abs=1e-9)
    final = run / "checkpoints" / "step-000002"
    assert read_record(final)["reference"] == {"kind": "starting_adapter", "model": str(start)}
    assert not (final / "reference").exists()  # the frozen copy is never saved as part of the result


def test_a_chosen_system_prompt_is_trained_with_saved_with_the_checkpoint_and_kept_by_later_runs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agent.checkpoint import PROMPT_FILE, checkpoint_system_prompt
    from agent.prompt import COMPACT_SYSTEM_PROMPT, SYSTEM_PROMPT
    from train.checkpoints import merge_adapter
    from train.config import RLConfig, SFTConfig
    from train.rl import train_rl
    from train.runs import system_prompt_for
    from train.sft import train_sft

    assert system_prompt_for(None, tiny_model_dir) == SYSTEM_PROMPT  # a checkpoint that says nothing
    common = {"data": SIM_DATA, "resize": RESIZE, "max_steps": 1, "save_every": 1}
    sft = train_sft(
        SFTConfig.model_validate(
            {
                "model": tiny_model_dir,
                "output_dir": tmp_path / "sft",
                "batch_size": 2,
                "system_prompt": "compact",
                "learner": {"lora": {"rank": 4}},
                **common,
            }
        ),
        progress=False,
    )
    start = sft / "checkpoints" / "step-000001"
    assert (start / PROMPT_FILE).read_text() == COMPACT_SYSTEM_PROMPT
    rl = train_rl(
        RLConfig.model_validate(rl_body(start, output_dir=tmp_path / "rl", **common)), progress=False
    )
    assert checkpoint_system_prompt(rl / "checkpoints" / "step-000001") == COMPACT_SYSTEM_PROMPT  # kept
    merged = merge_adapter(rl / "checkpoints" / "step-000001", tmp_path / "merged")
    assert checkpoint_system_prompt(merged) == COMPACT_SYSTEM_PROMPT
