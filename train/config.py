"""Run configurations: one file (YAML, TOML or JSON) validated into these models, saved with every
checkpoint. Defaults are METHOD.md's; the comments say where a value comes from.

    uis1 train rl --config rl.yaml
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.geometry import ResizeSettings
from agent.settings import AgentSettings, StoreSettings
from agent.vllm_policy import VllmSettings
from train.advantages import AdvantageSettings
from train.curation import CurationSettings
from train.data import Source
from train.judge import JudgeSettings
from train.loss import LossSettings
from train.matching import MatchSettings
from train.model import LoraSettings
from train.online import OnlineSettings
from train.rollout import RolloutSettings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OptimSettings(_Strict):
    # Constant, no warm-up (the paper's RL setting); 0 runs everything but moves no weight.
    lr: float = Field(1e-6, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    betas: tuple[float, float] = (0.9, 0.999)


class DeepSpeedSettings(_Strict):
    zero_stage: Literal[0, 1, 2, 3] = 2
    offload_optimizer: bool = False  # ZeRO-Offload of the optimizer state to CPU memory
    bf16: Literal["auto", "on", "off"] = "auto"  # auto: on with CUDA (bf16 on CPU is ~20x slower)


class LearnerSettings(_Strict):
    backend: Literal["torch", "deepspeed"] = "torch"
    deepspeed: DeepSpeedSettings = DeepSpeedSettings()
    lora: LoraSettings | None = None  # None: full fine-tune
    gradient_checkpointing: bool = False
    device: str = "auto"  # auto: cuda when available
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # Samples per forward pass in the log-prob, reference and update passes (left-padded, masked;
    # train.batching). 1: one at a time. On a GPU a few samples per pass use it far better.
    micro_batch: int = Field(1, ge=1, le=256)


class DataSettings(_Strict):
    sources: list[Source] = Field(min_length=1)
    val_fraction: float = Field(0.1, ge=0, lt=1)
    split_seed: int = 0


class DynamicSampling(_Strict):
    enabled: bool = True
    eta: float = Field(0.3, ge=0)  # drop a group when its signal's spread is <= eta
    # What the spread is taken of: "r0" (the paper: the rollouts' R_0) or "any_step" (the largest
    # spread of R_t at any step, or of the summed rewards; train.advantages.group_spread says why).
    signal: Literal["r0", "any_step"] = "r0"
    max_extra_draws: int = Field(64, ge=0)  # then train on what there is


class EngineSettings(_Strict):
    kind: Literal["transformers", "vllm"] = "transformers"
    vllm: VllmSettings = VllmSettings()
    # How the current weights reach vLLM between steps: a LoRA adapter loaded under a new name,
    # or a full checkpoint reloaded in place.
    sync: Literal["lora", "reload"] = "lora"


class RLConfig(_Strict):
    kind: Literal["rl"] = "rl"
    model: Path  # the starting checkpoint (usually the SFT one)
    output_dir: Path
    parent_version: str | None = None  # registry version the start model is, if any
    seed: int = 0
    data: DataSettings
    rollout: RolloutSettings = RolloutSettings()
    match: MatchSettings = MatchSettings()
    advantage: AdvantageSettings = AdvantageSettings()
    dynamic_sampling: DynamicSampling = DynamicSampling()
    loss: LossSettings = LossSettings()
    optim: OptimSettings = OptimSettings()
    learner: LearnerSettings = LearnerSettings()
    engine: EngineSettings = EngineSettings()
    resize: ResizeSettings = ResizeSettings()
    # The system prompt: a built-in one by name ("ui-s1", "compact") or the text itself; None: the
    # one the starting checkpoint was trained with (UI-S1's if it says none). Saved with every checkpoint.
    system_prompt: str | None = None
    tasks_per_step: int = Field(32, gt=0)
    mini_batches: int = Field(4, gt=0)  # optimiser steps per training step
    epochs: int = Field(5, gt=0)
    max_steps: int | None = Field(None, gt=0)
    # A time budget: stop (and save) after the step that reaches this many seconds of training in
    # this process (a resumed run starts a new budget). For a nightly window, or equal compute.
    max_seconds: float | None = Field(None, gt=0)
    save_every: int = Field(5, gt=0)
    eval_every: int | None = Field(10, gt=0)
    log_entropy: bool = True


class SFTConfig(_Strict):
    kind: Literal["sft"] = "sft"
    model: Path
    output_dir: Path
    parent_version: str | None = None
    seed: int = 0
    data: DataSettings
    # Train on the thoughts stored with the data (empty where a step has none). Off: thought-free
    # responses, which the paper-form reward scores 0 (its format term wants a non-empty think
    # block); RL from such a checkpoint needs rollout.reward: code.
    thoughts: bool = True
    optim: OptimSettings = OptimSettings(lr=1e-5)
    learner: LearnerSettings = LearnerSettings()
    resize: ResizeSettings = ResizeSettings()
    system_prompt: str | None = None  # as RLConfig.system_prompt
    batch_size: int = Field(8, gt=0)  # expert steps per optimiser step
    epochs: int = Field(1, gt=0)
    max_steps: int | None = Field(None, gt=0)
    max_seconds: float | None = Field(None, gt=0)  # as RLConfig.max_seconds
    save_every: int = Field(50, gt=0)


class EvalConfig(_Strict):
    kind: Literal["eval"] = "eval"
    model: Path
    adapter: Path | None = None
    output: Path | None = None  # the results JSON (default: beside the model)
    data: DataSettings
    split: Literal["val", "train", "all"] = "val"
    match: MatchSettings = MatchSettings()
    engine: EngineSettings = EngineSettings()
    resize: ResizeSettings = ResizeSettings()
    system_prompt: str | None = None  # None: the checkpoint's own (as RLConfig.system_prompt)
    max_new_tokens: int = Field(512, gt=0)
    metrics: tuple[Literal["sop", "steps"], ...] = ("sop", "steps")
    device: str = "auto"


RunConfig = Annotated[RLConfig | SFTConfig | EvalConfig, Field(discriminator="kind")]


def read_file(path: Path) -> dict[str, Any]:
    """A config file's mapping; a file that does not parse is a ValueError naming it and the place.

    Parsed by PyYAML, tomllib and json. pydantic-settings' file sources were weighed and left: they
    skip a file that is missing (a run config must exist) and raise the parser's error without the
    file's name."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            raise ValueError(f"{path}: not valid YAML: {where}{exc.problem or exc.context}") from None
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    elif path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
    elif path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
    else:
        raise ValueError(f"{path}: a run config is .yaml, .toml or .json")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def load_config(
    path: Path, kind: str, overrides: dict[str, Any] | None = None
) -> RLConfig | SFTConfig | EvalConfig:
    """Validate a config file as ``kind``; relative paths in it are relative to the file."""
    data = {**read_file(path), **(overrides or {}), "kind": kind}
    models: dict[str, type[RLConfig | SFTConfig | EvalConfig]] = {
        "rl": RLConfig,
        "sft": SFTConfig,
        "eval": EvalConfig,
    }
    config = models[kind].model_validate(data)
    resolved: RLConfig | SFTConfig | EvalConfig = _relative_to(config, path.parent)
    return resolved


def _relative_to(config: Any, base: Path) -> Any:
    """Resolve the config's relative paths against ``base``."""
    updates: dict[str, Any] = {}
    for name in ("model", "output_dir", "adapter", "output"):
        value = getattr(config, name, None)
        if isinstance(value, Path) and not value.is_absolute():
            updates[name] = (base / value).resolve()
    sources = []
    for source in config.data.sources:
        fixes = {
            k: (base / v).resolve()
            for k in ("path", "images", "screenshot_dir")
            if isinstance(v := getattr(source, k, None), Path) and not v.is_absolute()
        }
        sources.append(source.model_copy(update=fixes))
    updates["data"] = config.data.model_copy(update={"sources": sources})
    return config.model_copy(update=updates)


# -- the nightly retraining job's config (``uis1 retrain``) -------------------------------------
class EvaluationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    holdout: bool = True  # SOP on the curated held-out split
    data: list[Source] = Field(default_factory=list)  # pinned evaluation data besides it
    online: OnlineSettings | None = OnlineSettings()  # success on simulated-phone tasks; None: off
    max_new_tokens: int = Field(512, gt=0)
    device: str = "auto"


class RetrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["retrain"] = "retrain"
    work_dir: Path  # curated sets, runs and evaluations, one folder per job
    store: StoreSettings = Field(default_factory=lambda: AgentSettings().store)  # the service's by default
    base_model: Path | None = None  # where a first run starts (registered and promoted as the base)
    base_served_name: str | None = None  # the name vLLM serves base_model by (default: its folder name)
    # Full checkpoints swapped into the running engine in place keep the engine's served name; set
    # it here. Default: the version's own name (adapters, and blue/green engines).
    served_name: str | None = None
    version_prefix: str = Field("uis1", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,40}$")
    min_new_episodes: int = Field(20, ge=0)
    curation: CurationSettings = CurationSettings()
    # A judge model labels unlabelled episodes before curation; its verdicts are then trusted.
    judge: JudgeSettings = JudgeSettings()
    extra_sources: list[Source] = Field(default_factory=list)  # expert data mixed into every run
    stages: list[Literal["sft", "rl"]] = Field(default_factory=lambda: ["rl"], min_length=1)  # type: ignore[arg-type]
    sft: dict[str, Any] = Field(default_factory=dict)  # SFTConfig fields (model, data, output_dir are set)
    rl: dict[str, Any] = Field(default_factory=dict)  # RLConfig fields, likewise
    resize: ResizeSettings = ResizeSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    lock_ttl_s: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _stage_configs_validate(self) -> RetrainConfig:
        for stage in self.stages:  # a typo in sft: or rl: fails when the file is read, not at 2 a.m.
            self.stage_config(stage, Path("."), Path("."), {"sources": [{"kind": "sim"}]}, None)
        return self

    def stage_config(
        self, stage: str, model: Path, output_dir: Path, data: dict[str, Any], parent: str | None
    ) -> Any:
        overrides = self.sft if stage == "sft" else self.rl
        body = {
            "resize": self.resize.model_dump(),
            **overrides,
            "model": str(model),
            "output_dir": str(output_dir),
            "data": data,
            "parent_version": parent,
        }
        return (SFTConfig if stage == "sft" else RLConfig).model_validate(body)


def load_retrain_config(path: Path) -> RetrainConfig:
    """Read a retrain config file; relative paths in it are relative to the file."""
    data = read_file(path)
    data.pop("kind", None)
    config = RetrainConfig.model_validate(data)
    base = path.parent

    def fix(value: Path | None) -> Path | None:
        return value if value is None or value.is_absolute() else (base / value).resolve()

    def fix_sources(sources: list[Any]) -> list[Any]:
        return [
            s.model_copy(
                update={
                    k: fix(v)
                    for k in ("path", "images", "screenshot_dir")
                    if isinstance(v := getattr(s, k, None), Path)
                }
            )
            for s in sources
        ]

    return config.model_copy(
        update={
            "work_dir": fix(config.work_dir),
            "base_model": fix(config.base_model),
            "store": config.store.model_copy(update={"screenshot_dir": fix(config.store.screenshot_dir)}),
            "extra_sources": fix_sources(config.extra_sources),
            "evaluation": config.evaluation.model_copy(update={"data": fix_sources(config.evaluation.data)}),
        }
    )
