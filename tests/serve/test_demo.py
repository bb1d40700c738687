from __future__ import annotations

from pathlib import Path

import pytest

from serve.demo import run_demo

pytestmark = pytest.mark.timeout(180)


def test_the_demo_runs_its_tasks_to_success_with_the_expert_policy(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    failures = run_demo("expert", phones=2, data_dir=tmp_path)
    out = capsys.readouterr().out
    assert failures == 0
    assert "policy: the simulated tasks' expert solvers" in out
    assert "4/4 tasks done" in out
    assert (tmp_path / "trajectories.db").is_file()
    assert any((tmp_path / "screenshots").rglob("*.png"))


def test_the_demo_says_plainly_that_the_tiny_model_cannot_do_tasks(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    failures = run_demo("tiny", phones=1, data_dir=tmp_path)
    out = capsys.readouterr().out
    assert "random weights: every task will fail" in out
    assert failures == 2
    assert "unparseable response" in out
