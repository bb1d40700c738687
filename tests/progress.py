"""Waiting on a child process by its progress, not by the clock.

A fixed deadline fails on a busy machine for reasons unrelated to the code: the same run that takes
two minutes alone takes fifteen beside a benchmark. What a test needs to catch is a child that
hangs, so these helpers fail when the child (with its own children) has used no CPU for
``stall_s`` seconds, and otherwise wait as long as it works (up to a cap far above any honest run).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

STALL_S = 240.0  # no CPU used by the child or its children for this long: it hangs
CAP_S = 3 * 3600.0  # whatever happens, a test gives up after this


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its descendants so far (0 once it is gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def wait_while_working(
    process: subprocess.Popen[str] | subprocess.Popen[bytes],
    done: Callable[[], bool],
    *,
    stall_s: float = STALL_S,
    cap_s: float = CAP_S,
    every_s: float = 0.2,
) -> None:
    """Return once ``done()``; fail if the process ends first, or uses no CPU for ``stall_s``."""
    started = last_change = time.monotonic()
    used = cpu_seconds(process.pid)
    while not done():
        if process.poll() is not None:
            if done():  # it got there as it ended
                return
            raise AssertionError(f"the process ended (exit {process.returncode}) before it got there")
        now = time.monotonic()
        # Any change counts: the sum can fall for a moment when a child ends before it is reaped.
        if (seen := cpu_seconds(process.pid)) != used:
            used, last_change = seen, now
        if now - last_change > stall_s:
            raise AssertionError(f"the process used no CPU for {stall_s:.0f} s: it hangs")
        if now - started > cap_s:
            raise AssertionError(f"the process ran for more than {cap_s:.0f} s")
        time.sleep(every_s)


def run_while_working(
    command: Sequence[str], *, cwd: Path, stall_s: float = STALL_S, cap_s: float = CAP_S
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with the output captured, waited on by progress (``wait_while_working``);
    a hung child is killed with its children before the test fails."""
    with subprocess.Popen(
        list(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            # communicate() drains both pipes while it waits (a large output never blocks the child);
            # one that times out can be called again without losing what it read.
            outputs: list[str] = []

            def finished() -> bool:
                try:
                    outputs.extend(process.communicate(timeout=0.5))
                except subprocess.TimeoutExpired:
                    return False
                return True

            wait_while_working(process, finished, stall_s=stall_s, cap_s=cap_s, every_s=0.0)
        except AssertionError:
            _kill_tree(process.pid)
            raise
        stdout, stderr = outputs
        return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
