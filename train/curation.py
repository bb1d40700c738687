"""Curation: logged traffic becomes training data only with a trustworthy label.

An episode in the store is used when its outcome was given by someone or something trusted:
client feedback (``label_source: client``), a program that checked the device's state
(``checker``, e.g. a simulated phone's task check), an imported dataset (``dataset``), or, only
when switched on, a judge model (``judge``; see ``train.judge``). Then:

- a successful episode is an expert trajectory whole; a failed one with takeover corrections is
  one up to its last corrected (human) step; anything else is left out;
- steps whose response did not parse are left out (the episode retried on the same screen), and a
  trajectory is cut before its first all-black frame (screen off, or an app that forbids capture)
  or failed step, since the steps after it would have a hole in their history;
- duplicates (same goal, same actions) are kept once;
- a fixed share of goals, chosen by a salted hash of the goal text, is held out for evaluation and
  never enters training, in this set or any later one.

The result is a folder: ``train.jsonl`` and ``holdout.jsonl`` in the interchange format (screenshots
by absolute path into the screenshot store) and ``manifest.json`` (counts, reasons, episode ids,
file hashes). ``uis1 retrain`` runs this before every training job.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.interchange import episode_to_record
from agent.parsing import first_tag
from agent.trajectory import ActionLabel, Episode, Step, StepSource, utcnow

log = logging.getLogger(__name__)

TRUSTED_SOURCES = ("client", "checker", "dataset")


class CurationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    holdout_fraction: float = Field(0.1, ge=0, lt=1)
    holdout_salt: str = "uis1-holdout-1"  # changing it reshuffles the held-out goals: don't
    trust_judge: bool = False  # use the judge model's verdicts (only when the judge is on)
    use_corrections: bool = True  # failed episodes up to their last human step
    min_steps: int = Field(1, ge=1)
    max_episodes: int = Field(100_000, gt=0)


@dataclass
class CuratedSet:
    dir: Path
    train: list[Episode]
    holdout: list[Episode]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def train_file(self) -> Path:
        return self.dir / "train.jsonl"

    @property
    def holdout_file(self) -> Path:
        return self.dir / "holdout.jsonl"


def normalized_goal(goal: str) -> str:
    return " ".join(goal.lower().split())


def is_held_out(goal: str, settings: CurationSettings) -> bool:
    """A pure function of the goal: the same goal is always on the same side of the split."""
    digest = hashlib.sha256(f"{settings.holdout_salt}\0{normalized_goal(goal)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < settings.holdout_fraction


def label_source(episode: Episode) -> str | None:
    """Who gave the episode its outcome; None when nobody did."""
    if episode.is_successful is None:
        return None
    source = episode.labels.get("label_source")
    if source is None and "feedback" in episode.labels:
        return "client"  # feedback given before sources were recorded came from clients
    return source


def trusted(episode: Episode, settings: CurationSettings) -> bool:
    source = label_source(episode)
    return source in TRUSTED_SOURCES or (source == "judge" and settings.trust_judge)


def expert_steps(episode: Episode) -> tuple[list[Step], str | None]:
    """The episode's usable steps as expert steps, and why it was cut short (None: it was not).

    Whole when successful; up to the last human step when failed but corrected; empty otherwise.
    """
    human = [s.index for s in episode.steps if s.source is StepSource.HUMAN]
    if episode.is_successful:
        upto = len(episode.steps) - 1
    elif human:
        upto = max(human)
    else:
        return [], "failed without corrections"
    out: list[Step] = []
    cut: str | None = None
    for step in episode.steps[: upto + 1]:
        if step.extra.get("black_frame"):
            cut = "black frame"
            break
        if step.extra.get("secret"):  # its text is masked: not an action to learn
            cut = "secret typed"
            break
        if step.error:
            cut = "failed step"
            break
        label = step.expert or (ActionLabel.from_action(step.device_action) if step.device_action else None)
        if label is None:
            continue  # an unparseable response: the same screen was tried again
        thought = step.thought
        if thought is None and step.source is StepSource.POLICY and step.raw_response:
            thought = (first_tag(step.raw_response, "think") or "").strip() or None
        out.append(
            step.model_copy(
                update={
                    "expert": label,
                    "thought": thought,
                    "index": len(out),
                    "raw_response": None,
                    "extra": {},
                }
            )
        )
    return out, cut


def _dedupe_key(episode: Episode) -> str:
    actions = [s.expert.to_dict() if s.expert else None for s in episode.steps]
    blob = json.dumps([normalized_goal(episode.goal), actions], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def curate(
    episodes: Iterable[Episode],
    out_dir: Path,
    settings: CurationSettings | None = None,
    *,
    previous: dict[str, Any] | None = None,
    screenshot_dir: Path | None = None,
) -> CuratedSet:
    """Curate ``episodes`` (oldest first) into ``out_dir``. ``previous`` is the manifest of the last
    curated set: the new manifest says how many training episodes it did not have. With the store's
    ``screenshot_dir``, an episode whose screenshots the retention deleted is left out."""
    s = settings or CurationSettings()
    counts = _Counts()
    seen: set[str] = set()
    train: list[Episode] = []
    holdout: list[Episode] = []
    for episode in episodes:
        counts.considered += 1
        expert = _expert_copy(episode, s, counts, screenshot_dir)
        if expert is None:
            continue
        key = _dedupe_key(expert)
        if key in seen:
            counts.dropped["duplicate"] += 1
            continue
        seen.add(key)
        counts.sources[label_source(episode) or "?"] += 1
        (holdout if is_held_out(episode.goal, s) else train).append(expert)
        if len(train) + len(holdout) >= s.max_episodes:
            break
    manifest = _write(out_dir, train, holdout, s, counts, previous)
    log.info(
        "curated %d training and %d held-out episodes from %d (%d new)",
        len(train),
        len(holdout),
        counts.considered,
        manifest["new_train"],
    )
    return CuratedSet(out_dir, train, holdout, manifest)


@dataclass
class _Counts:
    """What curation saw: episodes considered, dropped (by reason), cut short, and label sources."""

    considered: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    cuts: Counter[str] = field(default_factory=Counter)
    sources: Counter[str] = field(default_factory=Counter)


def training_copy(
    episode: Episode, settings: CurationSettings | None = None, screenshot_dir: Path | None = None
) -> Episode | None:
    """The episode as training data under curation's one rule (a trusted label; its expert steps,
    cut at a black frame, a failed step or a secret), or None when it may not be trained on.
    Every path from the store to training goes through here: ``curate`` and the ``store`` source."""
    return _expert_copy(episode, settings or CurationSettings(), _Counts(), screenshot_dir)


def _expert_copy(
    episode: Episode, s: CurationSettings, counts: _Counts, screenshot_dir: Path | None = None
) -> Episode | None:
    """The episode as training data (its expert steps only), or None with the reason counted."""
    if not episode.status.finished:
        counts.dropped["not finished"] += 1
        return None
    if not trusted(episode, s):
        source = label_source(episode)
        counts.dropped["no trusted label" if source is None else f"untrusted label ({source})"] += 1
        return None
    if not episode.is_successful and not s.use_corrections:
        counts.dropped["failed"] += 1
        return None
    steps, cut = expert_steps(episode)
    if not steps and cut == "failed without corrections":
        counts.dropped[cut] += 1
        return None
    if cut:
        counts.cuts[cut] += 1
    if len(steps) < s.min_steps:
        counts.dropped["too few usable steps"] += 1
        return None
    if screenshot_dir is not None and any(_gone(step, screenshot_dir) for step in steps):
        # the screenshot retention deleted what it showed
        counts.dropped["screenshots deleted"] += 1
        return None
    kind = "successful" if episode.is_successful else "corrected"
    return episode.model_copy(
        update={
            "steps": steps,
            "extra": {},
            "labels": {**episode.labels, "source_episode": episode.id, "curated_as": kind},
        }
    )


def _write(
    out_dir: Path,
    train: list[Episode],
    holdout: list[Episode],
    s: CurationSettings,
    counts: _Counts,
    previous: dict[str, Any] | None,
) -> dict[str, Any]:
    """Write the two JSONL files and the manifest (what was kept, dropped and why); returns it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, items in (("train.jsonl", train), ("holdout.jsonl", holdout)):
        text = "".join(json.dumps(_record(e), ensure_ascii=False) + "\n" for e in items)
        (out_dir / name).write_text(text, encoding="utf-8")
        files[name] = hashlib.sha256(text.encode()).hexdigest()
    before = set((previous or {}).get("episodes", {}).get("train", []))
    train_ids = [e.labels["source_episode"] for e in train]
    manifest = {
        "created_at": utcnow().isoformat(),
        "settings": s.model_dump(),
        "considered": counts.considered,
        "train": len(train),
        "holdout": len(holdout),
        "steps": sum(len(e.steps) for e in train),
        "new_train": len([i for i in train_ids if i not in before]),
        "label_sources": dict(counts.sources),
        "dropped": dict(counts.dropped),
        "cut": dict(counts.cuts),
        "files": files,
        "episodes": {"train": train_ids, "holdout": [e.labels["source_episode"] for e in holdout]},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


def _record(episode: Episode) -> dict[str, Any]:
    record = episode_to_record(episode)
    record["episode_id"] = episode.labels["source_episode"]
    return record


def curate_store(
    url: str,
    screenshot_dir: Path,
    out_dir: Path,
    settings: CurationSettings | None = None,
    *,
    previous: dict[str, Any] | None = None,
    since: datetime | None = None,
    progress: bool = False,
) -> CuratedSet:
    """``curate`` over the episodes of a trajectory store, oldest first (a bar on stderr with
    ``progress``)."""
    from agent.store import EpisodeQuery, TrajectoryStore
    from train.tracking import progress_iter

    store = TrajectoryStore(url, screenshot_dir)
    limit = (settings or CurationSettings()).max_episodes

    def episodes() -> Iterable[Episode]:
        offset = 0
        while offset < limit:
            page = store.query(EpisodeQuery(since=since, limit=200, offset=offset, oldest_first=True))
            if not page:
                return
            yield from page
            offset += len(page)

    try:
        shown = progress_iter(episodes(), progress, "curating", "episode")
        return curate(shown, out_dir, settings, previous=previous, screenshot_dir=screenshot_dir)
    finally:
        store.engine.dispose()


def _gone(step: Step, screenshot_dir: Path) -> bool:
    """A step whose screenshot the store no longer has."""
    from agent.store import ScreenshotStore

    digest = step.screenshot.sha256
    return digest is not None and not ScreenshotStore(screenshot_dir).path(digest).is_file()
