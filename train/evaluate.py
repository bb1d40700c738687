"""Evaluation over expert trajectories: SOP (METHOD.md §7) and AndroidControl-style step metrics.

- **SOP** (semi-online performance): each trajectory replayed with the model's own history,
  greedy, no patching, stopping at the first mismatch. s_i matched steps of t_i:
  PG = mean(s_i / t_i), TSR = mean(s_i == t_i), Score = (PG + TSR) / 2.
- **Step metrics** (offline, the expert's history): type match, grounding accuracy (full matches
  among click and long-press steps whose type matched) and step success (full matches).

Either runs through any rollout engine (in-process transformers, or a vLLM server).

    uis1 train eval --config eval.yaml
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.parsing import parse_response
from agent.prompt import PromptSettings, build_conversation, prepare_image
from train.data import ExpertTrajectory
from train.matching import MatchSettings, match
from train.model import Sampling
from train.rollout import RolloutEngine, RolloutSettings, SemiOnlineRollout, expert_response
from train.tracking import progress_iter


def sop(
    engine: RolloutEngine,
    trajectories: Sequence[ExpertTrajectory],
    *,
    prompt: PromptSettings,
    match_settings: MatchSettings | None = None,
    max_new_tokens: int = 512,
    progress: bool = False,
) -> dict[str, Any]:
    roller = SemiOnlineRollout(
        engine,
        RolloutSettings(n=1, temperature=0.0, max_new_tokens=max_new_tokens),
        prompt=prompt,
        match=match_settings,
    )
    greedy = Sampling(temperature=0.0, max_new_tokens=max_new_tokens)
    counts: list[tuple[str, int, int]] = []  # (id, matched steps, expert steps)
    for trajectory in progress_iter(trajectories, progress, "eval: sop", "task"):
        (rollout,) = roller.run(trajectory, n=1, sampling=greedy, threshold=0)
        counts.append((trajectory.id, rollout.matched_steps, len(trajectory.steps)))
    rows = [{"id": i, "matched": s, "steps": t} for i, s, t in counts]
    if not counts:
        return {"pg": 0.0, "tsr": 0.0, "score": 0.0, "trajectories": 0, "per_trajectory": rows}
    pg = sum(s / t for _, s, t in counts) / len(counts)
    tsr = sum(s == t for _, s, t in counts) / len(counts)
    return {
        "pg": pg,
        "tsr": tsr,
        "score": (pg + tsr) / 2,
        "trajectories": len(counts),
        "per_trajectory": rows,
    }


def sampled_sop(
    engine: RolloutEngine,
    trajectories: Sequence[ExpertTrajectory],
    *,
    prompt: PromptSettings,
    k: int = 8,
    temperature: float = 1.0,
    match_settings: MatchSettings | None = None,
    max_new_tokens: int = 512,
) -> dict[str, dict[str, float]]:
    """SOP as the policy samples in training: per trajectory, ``k`` replays at ``temperature`` with
    the policy's own history and no patching. ``sampled``: the share of replays that matched every
    step; ``progress``: the mean share of steps matched before the first mismatch; ``greedy``: one
    greedy replay's success. A continuous score where greedy success sits at 0 or 1."""
    roller = SemiOnlineRollout(
        engine,
        RolloutSettings(n=k, temperature=temperature, max_new_tokens=max_new_tokens),
        prompt=prompt,
        match=match_settings,
    )
    greedy = Sampling(temperature=0.0, max_new_tokens=max_new_tokens)
    out: dict[str, dict[str, float]] = {}
    for trajectory in trajectories:
        steps = len(trajectory.steps)
        rollouts = roller.run(trajectory, threshold=0)
        (best,) = roller.run(trajectory, n=1, sampling=greedy, threshold=0)
        out[trajectory.source] = {
            "sampled": sum(r.matched_steps == steps for r in rollouts) / len(rollouts),
            "progress": sum(r.matched_steps / steps for r in rollouts) / len(rollouts),
            "greedy": float(best.matched_steps == steps),
        }
    return out


def step_metrics(
    engine: RolloutEngine,
    trajectories: Sequence[ExpertTrajectory],
    *,
    prompt: PromptSettings,
    match_settings: MatchSettings | None = None,
    max_new_tokens: int = 512,
    progress: bool = False,
) -> dict[str, Any]:
    greedy = Sampling(temperature=0.0, max_new_tokens=max_new_tokens)
    steps = type_ok = success = grounding_total = grounding_ok = parse_failures = 0
    for trajectory in progress_iter(trajectories, progress, "eval: steps", "task"):
        images = []
        history: list[str] = []
        for step in trajectory.steps:
            images.append(prepare_image(step.screenshot(), prompt))
            turns = build_conversation(trajectory.goal, images, history, prompt)
            parsed = parse_response(engine.generate(turns, 1, greedy)[0].text)
            resized = images[-1].geometry.resized
            outcome = (
                match(parsed.action, resized, step.expected(), match_settings) if parsed.action else None
            )
            steps += 1
            parse_failures += parsed.action is None
            if outcome is not None:
                type_ok += outcome.type_match
                success += outcome.full_match
                if step.expert.action in ("click", "long_press") and outcome.type_match:
                    grounding_total += 1
                    grounding_ok += outcome.full_match
            history.append(expert_response(step, resized, step.thought or ""))
    return {
        "steps": steps,
        "type_match": type_ok / max(steps, 1),
        "step_success": success / max(steps, 1),
        "grounding": grounding_ok / grounding_total if grounding_total else None,
        "parse_failure": parse_failures / max(steps, 1),
    }


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'metric':<22}{'value':>10}", "-" * 32]
    for section in ("sop", "steps"):
        for key, value in (results.get(section) or {}).items():
            if isinstance(value, float):
                lines.append(f"{section + '.' + key:<22}{value:>10.4f}")
            elif isinstance(value, int):
                lines.append(f"{section + '.' + key:<22}{value:>10d}")
    return "\n".join(lines)


def run_eval(config: Any, *, engine: RolloutEngine | None = None, progress: bool = False) -> dict[str, Any]:
    """Evaluate a checkpoint (``EvalConfig``) on its data split; writes and returns the results."""
    import json
    from pathlib import Path

    from train.data import load, split
    from train.learner import resolve_device

    trajectories = load(config.data.sources)
    train, val = split(trajectories, config.data.val_fraction, config.data.split_seed)
    chosen = {"val": val, "train": train, "all": trajectories}[config.split]
    if not chosen:
        raise ValueError(f"the {config.split} split is empty (val_fraction={config.data.val_fraction})")
    from train.runs import system_prompt_for

    model_path = Path(config.adapter or config.model)
    prompt = PromptSettings(
        resize=config.resize, system_prompt=system_prompt_for(config.system_prompt, model_path)
    )
    if engine is None:
        engine = _eval_engine(config, prompt, resolve_device(config.device))
    results: dict[str, Any] = {
        "model": str(config.model),
        "adapter": str(config.adapter) if config.adapter else None,
        "split": config.split,
        "trajectories": len(chosen),
    }
    passes = {"sop": sop, "steps": step_metrics}
    for name in (m for m in ("sop", "steps") if m in config.metrics):
        results[name] = passes[name](
            engine,
            chosen,
            prompt=prompt,
            match_settings=config.match,
            max_new_tokens=config.max_new_tokens,
            progress=progress,
        )
    out = config.output or (Path(config.adapter or config.model) / "eval.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    results["output"] = str(out)
    return results


def _eval_engine(config: Any, prompt: PromptSettings, device: str) -> RolloutEngine:
    from pathlib import Path

    from train.checkpoints import model_and_adapter
    from train.model import PolicyModel
    from train.rollout import TransformersEngine

    if config.engine.kind == "vllm":
        from train.vllm_engine import VllmEngine

        vllm: RolloutEngine = VllmEngine(config.engine, None, None, prompt=prompt)
        return vllm
    model, adapter = model_and_adapter(Path(config.model))
    policy = PolicyModel(model, adapter_dir=config.adapter or adapter, prompt=prompt, device=device)
    return TransformersEngine(policy, seed=0)
