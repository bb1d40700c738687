"""Per-step metrics of a run: one JSON object a line in ``metrics.jsonl``, and TensorBoard scalars;
the progress bars of long work (tqdm, on stderr).

``tensorboard --logdir RUN_DIR/tensorboard`` shows the curves. A resumed run appends, dropping
lines past the step it resumes from, so the file stays one line per step.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sized
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class Tracker:
    def __init__(self, run_dir: Path, *, resume_after: int | None = None, tensorboard: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        if resume_after is not None and self.path.is_file():
            kept = [
                line
                for line in self.path.read_text(encoding="utf-8").splitlines()
                if line and json.loads(line).get("step", 0) <= resume_after
            ]
            self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
        elif resume_after is None:
            self.path.write_text("", encoding="utf-8")
        self._writer: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # the train extra brings it; without it, JSONL only
                pass
            else:
                self._writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **metrics}, default=str) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def progress_iter(
    items: Iterable[T], enabled: bool, label: str, unit: str, total: int | None = None
) -> Iterable[T]:
    """``items`` with a tqdm bar on stderr while they are consumed (``items`` itself when disabled)."""
    if not enabled:
        return items
    from tqdm import tqdm

    if total is None and isinstance(items, Sized):
        total = len(items)
    bar: Iterable[T] = tqdm(items, total=total, desc=label, unit=unit, dynamic_ncols=True)
    return bar


def progress_bar(enabled: bool, total: int, initial: int, label: str) -> Any:
    """A tqdm bar on stderr (None when disabled, e.g. on ranks other than the first)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=label, unit="step", dynamic_ncols=True)
