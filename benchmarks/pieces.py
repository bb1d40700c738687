"""The cache of a long benchmark's pieces: one JSON file a piece, written whole or not at all, so a
run stopped anywhere goes on from the pieces it finished.

    from pieces import read_json, write_json    # benchmarks/ is on sys.path when a benchmark runs

the product's own nightly RL settings (``product_rl``), which the learning benchmarks train with,
and the interval of a gain over a control (``bootstrap_gain``), which they report.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
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


def bootstrap_gain(
    arm: dict[int, dict[str, float]], control: dict[str, float], reps: int = 4000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and 95% interval of (arm - control) per instance, resampling instances and seeds.

    ``control`` is one value per instance: the control's weights never move, so every evaluation
    of it (each point, each seed) measures the start policy, and their mean is its best estimate.
    """
    seeds = sorted(arm)
    ids = sorted(set(control).intersection(*(set(arm[s]) for s in seeds))) if seeds else []
    if not ids:
        return (float("nan"),) * 3
    gains = {s: {i: arm[s][i] - control[i] for i in ids} for s in seeds}
    mean = statistics.fmean(gains[s][i] for s in seeds for i in ids)
    rng = random.Random(seed)
    draws = sorted(
        statistics.fmean(
            gains[s][i] for s in [rng.choice(seeds) for _ in seeds] for i in [rng.choice(ids) for _ in ids]
        )
        for _ in range(reps)
    )
    return mean, draws[int(0.025 * reps)], draws[int(0.975 * reps) - 1]


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, nested dictionaries merged key by key."""
    out = dict(base)
    for key, value in top.items():
        out[key] = (
            deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def dotted(pairs: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` as ``{"a": {"b": 1}}``: overrides written as dotted paths, as a config nests them."""
    out: dict[str, Any] = {}
    for dotted, value in pairs.items():
        *path, last = dotted.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def setting_key(setting: Any, version: int) -> str:
    """A benchmark setting's cache key: its fields and the format ``version`` of its pieces."""
    from dataclasses import asdict

    blob = json.dumps({"format": version, **asdict(setting)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def resize(setting: Any) -> dict[str, int]:
    """The resize limits for a setting's ``image_tokens`` per screenshot (28 x 28 pixels a token)."""
    return {"max_pixels": setting.image_tokens * 28 * 28, "min_pixels": 4 * 28 * 28}
