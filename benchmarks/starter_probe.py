"""Can a starter read the screen? Three numbers per family that say why a policy fails its taps.

    .venv/bin/python benchmarks/starter_probe.py [--checkpoint DIR] [--held-out 4] [--json out.json]

For each step of each instance (the starter's own training instances, and held-out ones from the
held-out side of each family's split), with the expert's history, as the demo's starter is trained:

- **loss**: the expert's answer under teacher forcing, in nats per token (the trainer's path,
  ``train.model.PolicyModel.logprobs``) and in nats on the answer's worst token;
- **greedy**: whether the greedy answer (the inference path, ``agent.local_policy.LocalPolicy``)
  has the expert's action;
- **screen**: how much the expert's answer depends on the screen: its loss (nats, whole answer)
  with the step's own screenshot minus with the same step's screenshot of another instance of the
  family (the rows elsewhere). About 0: the model answers the same whatever the screen shows.

Default checkpoint: the demo's starter (``uis1 demo`` builds it; ``UIS1_CACHE_DIR``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine import about


@dataclass
class Tally:
    loss: list[float] = field(default_factory=list)  # nats per token
    worst: list[float] = field(default_factory=list)  # nats on the answer's worst token
    greedy: list[bool] = field(default_factory=list)
    screen: list[float] = field(default_factory=list)  # own screen minus another's, nats

    def row(self) -> dict[str, float | None]:
        return {
            "steps": len(self.loss),
            "loss_per_token": statistics.fmean(self.loss),
            "worst_token": statistics.fmean(self.worst),
            "greedy_equal": statistics.fmean(self.greedy),
            "screen_gain": statistics.fmean(self.screen)
            if self.screen
            else None,  # one instance: nothing to swap
        }


def _answer_loss(trainer: Any, goal: str, shots: list[Any], answers: list[str], i: int, current: Any) -> Any:
    """-log p of each token of the expert's answer at step ``i``, shown ``current`` as its screen."""
    import torch

    from agent.prompt import build_conversation

    turns = build_conversation(goal, [*shots[:i], current], answers[:i], trainer.prompt)
    with torch.no_grad():
        logp, _ = trainer.logprobs(trainer.sample(turns, answers[i]))
    return -logp


def _family(trainer: Any, engine: Any, data: list[Any], tally: Tally) -> None:
    """Every step of every instance in ``data``, into ``tally``."""
    from agent.geometry import ScreenGeometry
    from agent.parsing import parse_response
    from agent.prompt import build_conversation, prepare_image
    from train.rollout import expert_response

    prompt = trainer.prompt
    for k, trajectory in enumerate(data):
        other = data[(k + 1) % len(data)]
        shots = [prepare_image(step.screenshot(), prompt) for step in trajectory.steps]
        answers = [
            expert_response(s, ScreenGeometry.for_screen(s.size, prompt.resize).resized, s.thought or "")
            for s in trajectory.steps
        ]
        for i, step in enumerate(trajectory.steps):
            own = _answer_loss(trainer, trajectory.goal, shots, answers, i, shots[i])
            tally.loss.append(float(own.mean()))
            tally.worst.append(float(own.max()))
            if i < len(other.steps) and other.steps[i].sha256 != step.sha256:
                elsewhere = prepare_image(other.steps[i].screenshot(), prompt)
                moved = _answer_loss(trainer, trajectory.goal, shots, answers, i, elsewhere)
                tally.screen.append(float(moved.sum() - own.sum()))
            turns = build_conversation(trajectory.goal, shots[: i + 1], answers[:i], prompt)
            got = asyncio.run(engine.predict(turns)).parsed.action
            want = parse_response(answers[i]).action
            tally.greedy.append(got is not None and want is not None and got.to_dict() == want.to_dict())


def probe(checkpoint: Path, families: list[str], seeds: dict[str, list[int]], threads: int) -> dict[str, Any]:
    """The three numbers for each family's instances (``seeds``)."""
    import torch

    torch.set_num_threads(threads)
    from agent.checkpoint import checkpoint_system_prompt
    from agent.local_policy import LocalPolicy
    from agent.policy import SamplingSettings
    from agent.prompt import PromptSettings
    from serve.demo.loop.setting import IMAGE, MAX_TOKENS
    from train.data import LoadReport, SimSource, load
    from train.model import PolicyModel

    prompt = PromptSettings(resize=IMAGE, system_prompt=checkpoint_system_prompt(checkpoint))
    trainer = PolicyModel(checkpoint, prompt=prompt)
    trainer.model.eval()
    greedy = SamplingSettings(max_tokens=MAX_TOKENS, temperature=0.0)
    engine = LocalPolicy(checkpoint, prompt=prompt, device="cpu", sampling=greedy)
    out: dict[str, Any] = {}
    for family in families:
        source = SimSource(kind="sim", tasks=[family], seeds=seeds[family], display="learnable")
        tally = Tally()
        _family(trainer, engine, load([source], LoadReport()), tally)
        out[family] = tally.row()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, help="the policy to probe (default: the demo's starter)")
    parser.add_argument("--families", nargs="+", help="default: the demo's known tasks")
    parser.add_argument(
        "--trained", type=int, default=12, help="trained instances per family (the starter's own)"
    )
    parser.add_argument("--held-out", type=int, default=4, help="held-out instances per family")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from devices.sim.tasks.splits import seeds
    from serve.demo.loop.setting import LoopSetting, cache_dir

    setting = LoopSetting()
    checkpoint = args.checkpoint or cache_dir() / f"starter-{setting.starter_key()}"
    if not (checkpoint / "config.json").is_file():
        print(
            f"error: no checkpoint at {checkpoint}: run `uis1 demo` once, or pass --checkpoint",
            file=sys.stderr,
        )
        return 2
    families = args.families or list(setting.known)
    print(about())
    print(f"checkpoint: {checkpoint}")
    sides = {
        "trained": {f: setting.starter_seeds(f)[: args.trained] for f in families},
        "held_out": {f: seeds(f, "held_out", args.held_out, start=1) for f in families},
    }
    result = {side: probe(checkpoint, families, s, args.threads) for side, s in sides.items()}
    print(
        f"{'family':<18} {'side':<9} {'steps':>5} {'nats/token':>10} {'worst token':>11} {'greedy =':>8} {'screen':>7}"
    )
    for side, rows in result.items():
        for family, row in rows.items():
            screen = "-" if row["screen_gain"] is None else f"{row['screen_gain']:.3f}"
            print(
                f"{family:<18} {side:<9} {row['steps']:>5} {row['loss_per_token']:>10.4f} "
                f"{row['worst_token']:>11.3f} {row['greedy_equal']:>8.2f} {screen:>7}"
            )
    if args.json:
        args.json.write_text(
            json.dumps({"checkpoint": str(checkpoint), "machine": about(), **result}, indent=2) + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
