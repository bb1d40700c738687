"""The helpers that wait on a child by its progress (``tests.progress``): a hung child fails fast,
a working one is waited for, and output is never lost."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.progress import run_while_working, wait_while_working


def test_a_child_that_uses_no_cpu_is_called_hung() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    started = time.monotonic()
    try:
        with pytest.raises(AssertionError, match="used no CPU"):
            wait_while_working(child, lambda: False, stall_s=3, cap_s=30)
    finally:
        child.kill()
        child.wait()
    assert time.monotonic() - started < 60


def test_a_working_child_is_waited_for_past_the_stall_time(tmp_path: Path) -> None:
    """Busy for longer than ``stall_s``, then done: not a hang."""
    mark = tmp_path / "done"
    script = f"import time, pathlib\nend = time.time() + 4\nwhile time.time() < end: pass\npathlib.Path({str(mark)!r}).touch()\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_while_working(child, mark.exists, stall_s=2)
    finally:
        child.kill()
        child.wait()


def test_a_child_that_ends_first_fails_and_a_long_output_comes_back_whole(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    with pytest.raises(AssertionError, match="ended"):
        wait_while_working(child, lambda: False)
    result = run_while_working([sys.executable, "-c", "print('x' * 1_000_000)"], cwd=tmp_path)
    assert result.returncode == 0
    assert len(result.stdout) == 1_000_001
