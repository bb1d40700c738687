"""Shared fixtures: the tiny Qwen2.5-VL checkpoint and the UI-S1 interchange files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen2.5-VL checkpoint, built once per test session."""
    pytest.importorskip("transformers")
    from agent.tiny_model import ensure_tiny_model

    return ensure_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def interchange_dir() -> Path:
    """The real UI-S1 interchange files (AndroidControl-derived, no images).

    They live in the project's shared data folder beside the checkout (``UIS1_INTERCHANGE_DATA``
    overrides). Missing data skips the tests on a developer's machine and fails them in CI.
    """
    path = Path(os.environ.get("UIS1_INTERCHANGE_DATA", REPO.parent / "shared" / "data" / "ui-s1"))
    if not (path / "android_control_train_example.jsonl").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"interchange data not found at {path}")
        pytest.skip(f"interchange data not found at {path} (set UIS1_INTERCHANGE_DATA)")
    return path
