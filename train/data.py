"""Expert trajectories for training and evaluation, from three sources, with a manifest.

- **Interchange JSONL** (METHOD.md §9, e.g. AndroidControl-derived files): screenshots are found
  relative to the file (or under ``images``); a missing image is an error naming it, unless the
  source asks for stand-in frames (``stand_ins``, for bookkeeping runs on files shipped without
  images), each of its episode's screen size: the episode's ``screen`` field, else the smallest
  standard phone screen that holds its coordinates.
- **The trajectory store**: episodes labelled successful (client feedback, a task checker), and
  episodes a person corrected by takeover, up to and including the last corrected step.
- **The simulated phone's experts** (``devices.sim.tasks``): each task's solver run on an
  in-process phone, one screenshot before each action, then ``terminate``.

Every trajectory gets a content id (goal, labels and screenshot hashes), so the split into train
and validation is by trajectory and stable across runs, and the manifest saved with a run pins
exactly which data made it.

Loading also settles what each label means (``train.labels``): a stored swipe ``direction`` is read
in its dataset's convention (``scroll`` for AndroidControl-style files, ``finger`` for this
project's own recordings and exports, which say so with a ``swipe_convention`` field), and a
trajectory with a label that cannot become an action is left out. The manifest counts and names
both those and the swipes whose stored direction contradicts their coordinates.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from agent.geometry import Size
from agent.interchange import CONVENTION_FIELD
from agent.prompt import Screenshot
from agent.trajectory import ActionLabel, Episode
from train.labels import SwipeConvention, contradicts, label_problem
from train.matching import Expected

# Common phone screens (portrait), smallest first: an episode read without its images and without a
# ``screen`` field gets the first that holds every point its labels name. AndroidControl's frames
# are 1080x2400 but for ~8% of its episodes, which come from 1440-wide screens.
STANDARD_SCREENS = (Size(1080, 2400), Size(1440, 3120), Size(1440, 3200))


class DataError(ValueError):
    pass


@dataclass(frozen=True)
class ExpertStep:
    expert: ActionLabel
    size: Size
    check_options: ActionLabel | None = None
    thought: str | None = None
    png: bytes | None = field(default=None, repr=False)  # in memory (simulated phone, stand-ins)
    path: Path | None = None  # or on disk, read when needed
    sha256: str = ""
    convention: SwipeConvention = "scroll"  # what a stored swipe direction means in this step's data

    def screenshot(self) -> Screenshot:
        data = self.png if self.png is not None else self.path.read_bytes() if self.path else None
        if data is None:
            raise DataError("a step has no screenshot")
        return Screenshot(data=data, size=self.size)

    def expected(self) -> Expected:
        return Expected.of(self.expert, self.size, self.check_options, self.convention)


@dataclass(frozen=True)
class ExpertTrajectory:
    goal: str
    steps: tuple[ExpertStep, ...]
    source: str
    id: str = ""
    swipe_convention: SwipeConvention = "scroll"  # how its source stored swipe directions

    def __post_init__(self) -> None:
        if not self.steps:
            raise DataError(f"trajectory {self.goal!r} ({self.source}) has no steps")
        if not self.id:
            blob = json.dumps(
                [self.goal, [(s.expert.to_dict(), s.sha256) for s in self.steps]], sort_keys=True
            )
            object.__setattr__(self, "id", hashlib.sha256(blob.encode()).hexdigest()[:16])


# -- sources (the run config names them) ----------------------------------------------------------
class InterchangeSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["interchange"] = "interchange"
    path: Path
    images: Path | None = None  # folder the screenshot paths are relative to (default: the file's)
    # Render blank frames of each episode's screen size when images are missing.
    stand_ins: bool = False
    # What a stored swipe direction means; None: what each line says (``swipe_convention``), else
    # "scroll" (AndroidControl-style files).
    swipe_convention: SwipeConvention | None = None
    limit: int | None = Field(None, gt=0)


class StoreSource(BaseModel):
    """Episodes straight from a trajectory store, under the same rule as the nightly job's curation
    (``train.curation.training_copy``): only trusted labels (a person's feedback or a checker's;
    the judge's with ``trust_judge``), cut where curation cuts."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["store"] = "store"
    url: str
    screenshot_dir: Path
    limit: int = Field(10_000, gt=0)
    trust_judge: bool = False


class SimSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["sim"] = "sim"
    tasks: list[str] = Field(default_factory=list)  # empty: every registered task
    seeds: list[int] = Field(default_factory=lambda: [0])
    width: int = Field(1080, gt=0)
    height: int = Field(2400, gt=0)
    display: Literal["standard", "varied", "learnable"] = (
        "standard"  # the phone's display profile (devices.sim.display)
    )


Source = Annotated[InterchangeSource | StoreSource | SimSource, Field(discriminator="kind")]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _png_size(data: bytes) -> Size:
    with Image.open(io.BytesIO(data)) as image:
        return Size(*image.size)


@functools.lru_cache(maxsize=8)
def _blank(size: Size) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (240, 240, 240)).save(buffer, "PNG")
    return buffer.getvalue()


def screen_of(episode: Episode) -> Size:
    """The screen an episode was recorded on, for stand-in frames: its ``screen`` field, else the
    smallest standard screen that holds every point of its labels (boxes may reach past an edge)."""
    if episode.screen is not None:
        return Size(episode.screen.width, episode.screen.height)
    points = [
        p
        for step in episode.steps
        for label in (step.expert, step.check_options)
        if label is not None
        for p in (label.coordinate, label.coordinate2)
        if p is not None
    ]
    width = max((x for x, _ in points), default=0)
    height = max((y for _, y in points), default=0)
    for screen in STANDARD_SCREENS:
        if width < screen.width and height < screen.height:
            return screen
    return Size(int(width) + 1, int(height) + 1)


def convention_of(episode: Episode, default: SwipeConvention) -> SwipeConvention:
    said = episode.extra.get(CONVENTION_FIELD)
    return said if said in ("scroll", "finger") else default


def _from_episode(
    episode: Episode,
    source: str,
    images: Path,
    stand_ins: bool,
    convention: SwipeConvention,
    upto: int | None = None,
    *,
    logged: bool = False,
) -> ExpertTrajectory:
    """``logged``: recorded traffic, whose unparseable responses (retried on the same screen) are
    left out, and whose executed action is the label of a step without one."""
    steps = []
    stand_in = screen_of(episode) if stand_ins else None
    for step in episode.steps[: None if upto is None else upto + 1]:
        label = step.expert or (ActionLabel.from_action(step.device_action) if step.device_action else None)
        if label is None:
            if logged:
                continue
            raise DataError(f"{source}: step {step.index} has no expert label")
        path = Path(step.screenshot.uri)
        path = path if path.is_absolute() and path.is_file() else images / step.screenshot.uri.lstrip("/")
        if path.is_file():
            data = path.read_bytes()
            size = step.screenshot.size
            shot = ExpertStep(
                label,
                Size(size.width, size.height) if size else _png_size(data),
                step.check_options,
                step.thought,
                path=path,
                sha256=step.screenshot.sha256 or sha256_hex(data),
                convention=convention,
            )
        elif stand_in is not None:
            blank = _blank(stand_in)
            shot = ExpertStep(
                label,
                stand_in,
                step.check_options,
                step.thought,
                png=blank,
                sha256=sha256_hex(blank),
                convention=convention,
            )
        else:
            raise DataError(
                f"{source}: screenshot {step.screenshot.uri!r} of step {step.index} not found "
                f"(looked in {images}); set the source's images folder, or stand_ins: true"
            )
        steps.append(shot)
    return ExpertTrajectory(episode.goal, tuple(steps), source, swipe_convention=convention)


def load_interchange(src: InterchangeSource) -> list[ExpertTrajectory]:
    from agent.interchange import load_jsonl

    images = src.images or src.path.parent
    episodes = load_jsonl(src.path)[: src.limit]
    return [
        _from_episode(
            e,
            f"interchange:{src.path.name}#{i}",
            images,
            src.stand_ins,
            src.swipe_convention or convention_of(e, "scroll"),
        )
        for i, e in enumerate(episodes)
    ]


def load_store(src: StoreSource) -> list[ExpertTrajectory]:
    """Trusted successful episodes whole, trusted corrected ones up to their last human step, each
    cut where curation cuts (``train.curation.training_copy``); everything else is left out."""
    from agent.store import EpisodeQuery, TrajectoryStore
    from train.curation import CurationSettings, training_copy

    rule = CurationSettings(trust_judge=src.trust_judge)
    store = TrajectoryStore(src.url, src.screenshot_dir)
    out = []
    try:
        for episode in store.query(EpisodeQuery(limit=src.limit)):
            copy = training_copy(episode, rule, src.screenshot_dir)
            if copy is None:
                continue  # unlabelled, self-reported or failed traffic is never expert data
            # Recorded here (a device): finger motion; imported from a dataset: as the dataset said.
            convention = convention_of(episode, "finger" if episode.device is not None else "scroll")
            out.append(
                _from_episode(copy, f"store:{episode.id}", src.screenshot_dir, False, convention, logged=True)
            )
    finally:
        store.engine.dispose()
    return out


@dataclass
class LoadReport:
    """What loading found wrong with the data: trajectories left out, and steps to look at."""

    rejected: list[dict[str, Any]] = field(default_factory=list)  # source, goal, step, reason
    swipe_contradictions: list[dict[str, Any]] = field(default_factory=list)  # source, step, directions

    def as_dict(self) -> dict[str, Any]:
        return {
            "rejected": len(self.rejected),
            "rejected_trajectories": self.rejected,
            "swipe_contradictions": len(self.swipe_contradictions),
            "swipe_contradiction_steps": self.swipe_contradictions,
        }


def check(trajectory: ExpertTrajectory, report: LoadReport) -> bool:
    """Whether every label of the trajectory can become an action (noting why not in the report);
    swipes whose stored direction contradicts their coordinates are noted, and kept: the stored
    direction is the label."""
    for index, step in enumerate(trajectory.steps):
        expected = step.expected()
        problem = label_problem(step.expert, step.size, expected.finger_direction())
        if problem is not None:
            report.rejected.append(
                {"source": trajectory.source, "goal": trajectory.goal, "step": index, "reason": problem}
            )
            return False
        if contradicts(expected.label, step.convention):
            report.swipe_contradictions.append(
                {
                    "source": trajectory.source,
                    "step": index,
                    "stored": expected.finger_direction(),
                    "convention": step.convention,
                }
            )
    return True


def load(
    sources: Iterable[InterchangeSource | StoreSource | SimSource], report: LoadReport | None = None
) -> list[ExpertTrajectory]:
    """Every source's trajectories, each once, those with a label no policy could write left out."""
    report = report if report is not None else LoadReport()
    from train.sim_data import load_sim  # it builds on this module's types

    loaders: dict[str, Any] = {"interchange": load_interchange, "store": load_store, "sim": load_sim}
    trajectories: list[ExpertTrajectory] = []
    for src in sources:
        trajectories.extend(loaders[src.kind](src))
    seen: set[str] = set()
    unique = []
    for t in trajectories:  # the same trajectory from two sources counts once
        if t.id not in seen:
            seen.add(t.id)
            if check(t, report):
                unique.append(t)
    return unique


def split(
    trajectories: Sequence[ExpertTrajectory], val_fraction: float, seed: int = 0
) -> tuple[list[ExpertTrajectory], list[ExpertTrajectory]]:
    """Train/validation by trajectory, decided by a hash of its id: stable when data is added."""
    train: list[ExpertTrajectory] = []
    val: list[ExpertTrajectory] = []
    for t in trajectories:
        bucket = int(hashlib.sha256(f"{seed}:{t.id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        (val if bucket < val_fraction else train).append(t)
    return train, val


def manifest(
    sources: Sequence[BaseModel],
    train: Sequence[ExpertTrajectory],
    val: Sequence[ExpertTrajectory],
    report: LoadReport | None = None,
) -> dict[str, Any]:
    def entries(items: Sequence[ExpertTrajectory]) -> list[dict[str, Any]]:
        return [{"id": t.id, "source": t.source, "steps": len(t.steps)} for t in items]

    body = {
        "sources": [s.model_dump(mode="json") for s in sources],
        "counts": {
            "train": len(train),
            "val": len(val),
            "train_steps": sum(len(t.steps) for t in train),
            "val_steps": sum(len(t.steps) for t in val),
        },
        "train": entries(train),
        "val": entries(val),
        "swipe_conventions": {
            c: sum(t.swipe_convention == c for t in [*train, *val]) for c in ("scroll", "finger")
        },
        "checks": (report or LoadReport()).as_dict(),
    }
    body["sha256"] = sha256_hex(json.dumps([body["train"], body["val"]], sort_keys=True).encode())
    return body
