"""What reaches the PPO loss from a mini-batch: each sample's weight under the two aggregations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training import RESIZE


@pytest.mark.parametrize(
    ("aggregation", "want"),
    [
        # token-mean: -(A_long·L_long + A_short·L_short) / (L_long + L_short); the long junk sample
        # at A = -1 outweighs the short clean one at +1 by its length.
        ("token_mean", lambda long, short: -(-1.0 * long + 1.0 * short) / (long + short)),
        # sample-mean: each sample's token-mean, averaged: -(-1 + 1) / 2 = 0, whatever the lengths.
        ("sample_mean", lambda long, short: 0.0),
    ],
)
def test_the_aggregation_decides_how_much_a_long_sample_weighs(
    tiny_model_dir: Path, aggregation: str, want
) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    from agent.geometry import ResizeSettings
    from agent.prompt import PromptSettings, build_conversation
    from train.config import OptimSettings
    from train.learner import Item, TorchLearner
    from train.loss import LossSettings
    from train.model import PolicyModel

    policy = PolicyModel(tiny_model_dir, prompt=PromptSettings(resize=ResizeSettings(**RESIZE)))
    screen = [Image.new("RGB", (360, 800), (200, 30, 30))]
    turns = build_conversation("Turn on Wi-Fi", screen, [], policy.prompt)
    clean = '<think>\nTap it.\n</think>\n<action>\n{"action": "click", "coordinate": [12, 48]}\n</action>'
    junk = "wifi " * 40
    items = [Item(policy.sample(turns, junk), -1.0), Item(policy.sample(turns, clean), 1.0)]
    long, short = (i.sample.response_len for i in items)
    assert long > 2 * short
    for item in items:  # the sampling weights are the current ones: every ratio is 1
        policy.model.eval()
        item.old_logp = policy.logprobs(item.sample)[0].detach()
    settings = LossSettings(kl_beta=0.0, aggregation=aggregation)  # type: ignore[arg-type]
    result = TorchLearner(policy, OptimSettings(lr=0.0)).ppo_update(items, settings)
    assert result["pg_loss"] == pytest.approx(want(long, short), abs=1e-6)
