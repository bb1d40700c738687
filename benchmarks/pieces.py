"""The cache of a long benchmark's pieces: one JSON file a piece, written whole or not at all, so a
run stopped anywhere goes on from the pieces it finished.

    from pieces import read_json, write_json    # benchmarks/ is on sys.path when a benchmark runs

and the product's own nightly RL settings (``product_rl``), which the learning benchmarks train with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)  # a crash mid-write leaves the piece missing, never half-written


def read_json(path: Path) -> dict[str, Any] | None:
    """The piece, or None when it is not done yet."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def product_rl() -> dict[str, Any]:
    """The ``rl:`` block of the product's nightly config (``deploy/retrain.yaml``)."""
    import yaml

    config = yaml.safe_load((ROOT / "deploy" / "retrain.yaml").read_text(encoding="utf-8"))
    return dict(config.get("rl") or {})
