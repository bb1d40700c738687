"""The loop demo's outcome: a row per task instance, the before/after table, and its JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Row:
    family: str
    seed: int
    held_out: bool = False  # an instance from the held-out side of the task's split
    corrected: bool = False
    before: bool | None = None
    after: bool | None = None
    links: list[str] = field(default_factory=list)


@dataclass
class LoopResult:
    rows: list[Row]
    starter: str
    promoted: str | None
    corrected_steps: int
    requests_during_swap: int
    failed_requests: list[str]
    gate: dict[str, Any]
    data: Path
    timings: dict[str, float]
    answered_by: dict[str, int] = field(default_factory=dict)  # requests during the swap, by version
    varies: dict[str, str] = field(default_factory=dict)  # per task: how its held-out instances differ
    retraining: str = ""  # what the retraining ran (its stages, scaled to the tiny model)

    def success(self, when: str, *, corrected: bool | None = None, held_out: bool = False) -> int:
        return sum(
            bool(getattr(r, when))
            for r in self.rows
            if r.held_out == held_out and (corrected is None or r.corrected == corrected)
        )

    def count(self, *, held_out: bool) -> int:
        return sum(r.held_out == held_out for r in self.rows)


def render(result: LoopResult) -> Any:
    """The before/after table, and what it shows (a rich renderable)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    after = result.promoted or result.starter
    table = Table(title="Before and after retraining on the corrected traffic")
    for column in ("task", "instance", "corrected", result.starter, f"after: {after}"):
        table.add_column(column, overflow="fold")
    for row in sorted(result.rows, key=lambda r: (r.held_out, not r.corrected, r.family, r.seed)):
        table.add_row(
            row.family,
            f"held-out (seed {row.seed})" if row.held_out else f"demo (seed {row.seed})",
            "yes" if row.corrected else "",
            _cell(row.before),
            _cell(row.after),
        )
    lines: list[str] = []
    corrected = [r for r in result.rows if r.corrected]
    lines.append(
        f"Corrected tasks: {sum(bool(r.before) for r in corrected)}/{len(corrected)} done before, "
        f"{sum(bool(r.after) for r in corrected)}/{len(corrected)} after; people corrected "
        f"{result.corrected_steps} step(s). Held-out instances: "
        f"{result.success('before', held_out=True)}/{result.count(held_out=True)} before, "
        f"{result.success('after', held_out=True)}/{result.count(held_out=True)} after."
    )
    lines.append(
        f"Versions: {result.starter} -> {result.promoted or '(the candidate was not promoted)'}; "
        f"{result.requests_during_swap} requests during the retraining and swap, {len(result.failed_requests)} failed."
    )
    if result.retraining:
        lines.append(f"Retraining: {result.retraining}.")
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result.timings.items())
    lines.append(f"Time: {spent}.")
    lines.append(
        "Held-out instances are not copies of the trained ones: none has the goal and expert actions "
        "of an instance the starter or the traffic had. Per task, they differ in:"
    )
    lines.extend(f"  {family}: {what}" for family, what in result.varies.items())
    lines.append(_verdict(result))
    for row in result.rows:
        for link in row.links[-1:]:
            lines.append(f"  {row.family} ({'held-out ' if row.held_out else ''}seed {row.seed}): {link}")
    return Group(table, Text("\n".join(lines)))


def _verdict(result: LoopResult) -> str:
    """What the held-out rows show, whatever it is."""
    before, after = result.success("before", held_out=True), result.success("after", held_out=True)
    n = result.count(held_out=True)
    if result.promoted is None:
        return f"No new version was promoted, so the held-out rows ({before}/{n} -> {after}/{n}) compare the starter with itself."
    if after > before:
        return (
            f"On held-out instances the new version did better ({before}/{n} -> {after}/{n}): what it "
            "learnt from the corrections carried over to instances it was not trained on."
        )
    if after == before:
        return (
            f"On held-out instances nothing changed ({before}/{n} -> {after}/{n}): it learnt the corrected "
            "instances without carrying that over to others. One correction per task is very little data."
        )
    return (
        f"On held-out instances the new version did worse ({before}/{n} -> {after}/{n}): it learnt the "
        "corrected instances at the cost of others."
    )


def _cell(value: bool | None) -> str:
    return "-" if value is None else ("done" if value else "no")


def result_json(result: LoopResult) -> dict[str, Any]:
    out = asdict(result)
    out["data"] = str(result.data)
    return out
