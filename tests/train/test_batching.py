"""Micro-batches give each sample the log-probs (and the gradients) it gets alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.training import RESIZE


@pytest.fixture(scope="module")
def policy_and_samples(sft_checkpoint: Path):  # type: ignore[no-untyped-def]
    """Samples of different lengths: one and two screens, short and long responses."""
    from PIL import Image

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings, build_conversation
    from train.model import PolicyModel

    policy = PolicyModel(sft_checkpoint, prompt=PromptSettings(resize=ResizeSettings(**RESIZE)))
    red, blue = Image.new("RGB", (360, 800), (200, 30, 30)), Image.new("RGB", (720, 1600), (30, 30, 200))
    done = '<think>\nDone.\n</think>\n<action>\n{"action": "terminate", "status": "success"}\n</action>'
    tap = '<think>\nTap it.\n</think>\n<action>\n{"action": "click", "coordinate": [120, 480]}\n</action>'
    samples = [
        policy.sample(build_conversation("Turn on Wi-Fi", [red], [], policy.prompt), tap),
        policy.sample(build_conversation("Open the settings", [red, blue], [tap], policy.prompt), done),
        policy.sample(build_conversation("Go home", [blue], [], policy.prompt), "x"),
    ]
    assert len({s.prompt_ids.numel() for s in samples}) == 3  # every one padded differently
    return policy, samples


def test_a_micro_batch_gives_each_sample_its_own_log_probs(policy_and_samples) -> None:  # type: ignore[no-untyped-def]
    from train.batching import logprobs_batch

    policy, samples = policy_and_samples
    policy.model.eval()
    with torch.no_grad():
        alone = [policy.logprobs(s, entropy=True) for s in samples]
        together = logprobs_batch(policy, samples, entropy=True)
    for (one, one_ent), (batched, batched_ent) in zip(alone, together, strict=True):
        assert batched.shape == one.shape
        assert torch.allclose(batched, one, atol=1e-4, rtol=1e-4), (batched - one).abs().max()
        assert one_ent is not None
        assert batched_ent is not None
        assert torch.allclose(batched_ent, one_ent, atol=1e-4, rtol=1e-4)


def test_a_micro_batch_gives_the_gradients_of_one_sample_at_a_time(policy_and_samples) -> None:  # type: ignore[no-untyped-def]
    from train.batching import logprobs_batch

    policy, samples = policy_and_samples
    policy.model.train()
    params = [p for p in policy.parameters() if p.requires_grad]

    def grads(loss: torch.Tensor) -> list[torch.Tensor]:
        got = torch.autograd.grad(loss, params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(params, got, strict=True)]

    weights = [1.0, -0.5, 2.0]  # advantages of either sign
    alone = grads(sum(w * policy.logprobs(s)[0].sum() for w, s in zip(weights, samples, strict=True)))  # type: ignore[arg-type]
    together = logprobs_batch(policy, samples)
    batched = grads(sum(w * lp.sum() for w, (lp, _) in zip(weights, together, strict=True)))  # type: ignore[arg-type]
    worst = max(float((a - b).abs().max()) for a, b in zip(alone, batched, strict=True))
    scale = max(float(a.abs().max()) for a in alone)
    assert worst <= 1e-3 * scale + 1e-6, (worst, scale)


@pytest.mark.parametrize("kind", ["ppo", "sft"])
def test_an_update_in_micro_batches_is_the_update_one_at_a_time(sft_checkpoint: Path, kind: str) -> None:
    from PIL import Image

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings, build_conversation
    from train.config import LearnerSettings, OptimSettings
    from train.learner import Item, make_learner
    from train.loss import LossSettings
    from train.model import PolicyModel

    after = []
    for micro_batch in (1, 3):
        torch.manual_seed(0)
        policy = PolicyModel(sft_checkpoint, prompt=PromptSettings(resize=ResizeSettings(**RESIZE)))
        learner = make_learner(policy, OptimSettings(lr=1e-3), LearnerSettings(micro_batch=micro_batch))
        grads: list[torch.Tensor] = []

        def capture(grads: list[torch.Tensor] = grads, policy: PolicyModel = policy) -> float:
            grads.extend(
                torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in policy.parameters()
            )
            return 0.0

        learner._step = capture  # type: ignore[attr-defined,method-assign]
        rows: list[int] = []  # the samples in each training forward: the micro-batches ran batched
        policy.model.register_forward_pre_hook(
            lambda m, args, kwargs, rows=rows: (
                rows.append(int((kwargs["input_ids"] if "input_ids" in kwargs else args[0]).shape[0]))
                if m.training
                else None
            ),
            with_kwargs=True,
        )
        shot = Image.new("RGB", (360, 800), (200, 30, 30))
        responses = [
            "<think>\nA.\n</think>\n<action>\nx\n</action>",
            "short",
            "a longer answer than the others",
        ]
        items = [
            Item(policy.sample(build_conversation(f"goal {k}", [shot], [], policy.prompt), r), advantage=a)
            for k, (r, a) in enumerate(zip(responses, [1.0, -0.5, 0.25], strict=True))
        ]
        if kind == "ppo":
            policy.model.eval()
            with torch.no_grad():
                for item in items:
                    item.old_logp = policy.logprobs(item.sample)[0]
            learner.ppo_update(items, LossSettings())
        else:
            learner.sft_update(items)
        after.append(grads)
        assert rows == ([1, 1, 1] if micro_batch == 1 else [3]), (micro_batch, rows)
    worst = max(float((a - b).abs().max()) for a, b in zip(*after, strict=True))
    scale = max(float(g.abs().max()) for g in after[0])
    assert scale > 0
    assert worst <= 1e-4 * scale, (worst, scale)  # the same gradient the optimiser steps with


def test_prompts_generated_together_get_the_tokens_they_get_alone(tiny_model_dir: Path) -> None:
    """Greedy, a group's prompts in one padded ``generate`` call (different lengths, one and two
    screens, one of them asked twice) answer token for token as each does alone. The untrained
    model writes a long, different answer to each prompt, so every position is compared."""
    from PIL import Image

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings, build_conversation
    from train.model import PolicyModel, Sampling

    policy = PolicyModel(tiny_model_dir, prompt=PromptSettings(resize=ResizeSettings(**RESIZE)))
    red, blue = Image.new("RGB", (360, 800), (200, 30, 30)), Image.new("RGB", (720, 1600), (30, 30, 200))
    tap = '<think>\nTap it.\n</think>\n<action>\n{"action": "click", "coordinate": [120, 480]}\n</action>'
    prompts = [
        build_conversation("Turn on Wi-Fi", [red], [], policy.prompt),
        build_conversation("Open the settings", [red, blue], [tap], policy.prompt),
        build_conversation("Go home", [blue], [], policy.prompt),
    ]
    greedy = Sampling(temperature=0.0, top_p=1.0, max_new_tokens=24)
    alone = [policy.generate(turns, 1, greedy)[0] for turns in prompts]
    together = policy.generate_many([(prompts[0], 1), (prompts[1], 2), (prompts[2], 1)], greedy)
    assert [len(g) for g in together] == [1, 2, 1]
    for one, batched in zip(alone, [together[0][0], together[1][0], together[2][0]], strict=True):
        assert batched.tolist() == one.tolist()
    assert together[1][1].tolist() == alone[1].tolist()
    assert len({tuple(t.tolist()) for t in alone}) == 3  # each prompt its own answer
    assert min(len(t) for t in alone) > 10
