"""The loop demo's outcome: a row per task instance, the before/after table, and its JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Row:
    family: str
    seed: int
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

    def success(
        self, when: str, *, corrected: bool | None = None, held_out: bool = False, seed: int = 0
    ) -> int:
        return sum(
            bool(getattr(r, when))
            for r in self.rows
            if (r.seed != seed) == held_out and (corrected is None or r.corrected == corrected)
        )


def render(result: LoopResult) -> Any:
    """The before/after table, and what it shows (a rich renderable)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    after = result.promoted or result.starter
    table = Table(title="Before and after retraining on the corrected traffic")
    for column in ("task", "instance", "corrected", result.starter, f"after: {after}"):
        table.add_column(column, overflow="fold")
    for row in sorted(result.rows, key=lambda r: (r.seed != 0, not r.corrected, r.family)):
        table.add_row(
            row.family,
            "demo" if row.seed == 0 else f"held-out (seed {row.seed})",
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
        f"{result.success('before', held_out=True)}/{len([r for r in result.rows if r.seed])} before, "
        f"{result.success('after', held_out=True)}/{len([r for r in result.rows if r.seed])} after."
    )
    lines.append(
        f"Versions: {result.starter} -> {result.promoted or '(the candidate was not promoted)'}; "
        f"{result.requests_during_swap} requests during the retraining and swap, {len(result.failed_requests)} failed."
    )
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result.timings.items())
    lines.append(f"Time: {spent}.")
    lines.append(
        "What it learnt is shown on the corrected tasks; the held-out rows (instances no training "
        "saw) say whether it generalised. One correction per task is very little data: a held-out "
        "row that stays 'no' is the honest answer for a 0.8 M-parameter model."
    )
    for row in result.rows:
        for link in row.links[-1:]:
            lines.append(f"  {row.family} ({'demo' if row.seed == 0 else f'seed {row.seed}'}): {link}")
    return Group(table, Text("\n".join(lines)))


def _cell(value: bool | None) -> str:
    return "-" if value is None else ("done" if value else "no")


def result_json(result: LoopResult) -> dict[str, Any]:
    out = asdict(result)
    out["data"] = str(result.data)
    return out
