"""Import and export of the UI-S1 interchange JSONL (METHOD.md §9).

One JSON object a line: ``{goal, is_successful, steps: [{screenshot, action_content, ...}]}``, with
coordinates and boxes in original screenshot pixels. Importing keeps every field, the ones the
trajectory schema names and the ones it does not (in ``extra``), so exporting an imported file
gives back the same objects. Exporting the project's own episodes writes each step's trusted
label when it has one, else the action executed on the device.

An episode's ``screen`` (``{"width": W, "height": H}``) is the screen its pixels refer to, for
readers of a file shipped without its images. ``swipe_convention`` says what a stored swipe
``direction`` means: ``scroll`` (AndroidControl: scrolling down is a finger moving up; a file that
does not say is read this way) or ``finger``; episodes recorded by this service are exported with
``finger``. Coordinates are always finger motion.

Errors name the line: a corrupt line is reported, never half-imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from agent.trajectory import ActionLabel, Episode, EpisodeStatus, ScreenshotRef, Step, StepSource

# Step fields the schema maps by name; everything else rides in ``Step.extra``.
_STEP_TEXT_FIELDS = ("thought", "motivation", "action_description", "step_instruction")
_STEP_KNOWN = {"screenshot", "action_content", "check_options", *_STEP_TEXT_FIELDS}
_EPISODE_KNOWN = {"goal", "is_successful", "steps", "episode_id", "screen"}
CONVENTION_FIELD = "swipe_convention"


class InterchangeError(ValueError):
    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"{where}: {detail}")
        self.where = where
        self.detail = detail


def episode_from_record(record: Any, *, where: str = "record") -> Episode:
    """One interchange object to an ``Episode`` whose steps are expert steps."""
    if not isinstance(record, dict):
        raise InterchangeError(where, f"expected a JSON object, got {type(record).__name__}")
    for key in ("goal", "steps"):
        if key not in record:
            raise InterchangeError(where, f"missing {key!r}")
    if not isinstance(record["steps"], list):
        raise InterchangeError(where, "'steps' must be a list")
    steps = []
    for index, raw in enumerate(record["steps"]):
        steps.append(_step_from_record(raw, index, f"{where}, step {index}"))
    successful = record.get("is_successful")
    try:
        return Episode(
            external_id=record.get("episode_id"),
            goal=record["goal"],
            is_successful=successful,
            status=EpisodeStatus.SUCCEEDED if successful else EpisodeStatus.FAILED,
            screen=record.get("screen"),
            steps=steps,
            extra={k: v for k, v in record.items() if k not in _EPISODE_KNOWN},
        )
    except ValidationError as exc:
        raise InterchangeError(where, _first_error(exc)) from None


def _step_from_record(raw: Any, index: int, where: str) -> Step:
    if not isinstance(raw, dict):
        raise InterchangeError(where, f"expected a JSON object, got {type(raw).__name__}")
    if "action_content" not in raw or "screenshot" not in raw:
        raise InterchangeError(where, "a step needs 'screenshot' and 'action_content'")
    try:
        return Step(
            index=index,
            screenshot=ScreenshotRef(uri=raw["screenshot"]),
            source=StepSource.EXPERT,
            expert=ActionLabel.model_validate(raw["action_content"]),
            check_options=ActionLabel.model_validate(raw["check_options"])
            if "check_options" in raw
            else None,
            extra={k: v for k, v in raw.items() if k not in _STEP_KNOWN},
            **{k: raw[k] for k in _STEP_TEXT_FIELDS if k in raw},
        )
    except ValidationError as exc:
        raise InterchangeError(where, _first_error(exc)) from None


def episode_to_record(episode: Episode) -> dict[str, Any]:
    """An ``Episode`` as one interchange object. Steps with no action at all are left out."""
    steps = []
    for step in episode.steps:
        label = step.expert or (ActionLabel.from_action(step.device_action) if step.device_action else None)
        if label is None:
            continue
        out: dict[str, Any] = {"action_content": label.to_dict(), "screenshot": step.screenshot.uri}
        for key in _STEP_TEXT_FIELDS:
            value = getattr(step, key)
            if value is not None:
                out[key] = value
        if step.check_options is not None:
            out["check_options"] = step.check_options.to_dict()
        out.update(step.extra)
        steps.append(out)
    record: dict[str, Any] = {
        "goal": episode.goal,
        "is_successful": bool(episode.is_successful),
        "steps": steps,
    }
    if episode.external_id is not None:
        record["episode_id"] = episode.external_id
    if episode.screen is not None:
        record["screen"] = episode.screen.model_dump()
    if episode.device is not None:  # recorded here: labels are finger motion, and a file says so
        record[CONVENTION_FIELD] = "finger"
    record.update(episode.extra)
    return record


def read_jsonl(lines: Iterable[str], *, source: str = "input") -> Iterator[Episode]:
    """Episodes from interchange lines; blank lines are skipped, a bad line raises with its number."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise InterchangeError(where, f"not valid JSON ({exc})") from None
        yield episode_from_record(record, where=where)


def load_jsonl(path: Path) -> list[Episode]:
    with path.open(encoding="utf-8") as fh:
        return list(read_jsonl(fh, source=str(path)))


def write_jsonl(episodes: Iterable[Episode], out: TextIO) -> int:
    count = 0
    for episode in episodes:
        out.write(json.dumps(episode_to_record(episode), ensure_ascii=False) + "\n")
        count += 1
    return count


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "value"
    return f"{loc}: {err['msg']}"
