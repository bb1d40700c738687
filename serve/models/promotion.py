"""Promotion: the evaluation gate's decision on each candidate the retraining job registers, and the
swap (``serve.models.swap``) when it passes.

One loop takes every candidate: the promotion watcher. It looks every ``swap.watch_interval_s``
(other replicas' jobs, candidates whose swap had to wait for a lock or for episodes to drain), and
at once when a job of this process ends (``job_ended``). Several replicas may watch: the gate's
record is written once per decision, and a candidate another replica promoted or rejected
meanwhile is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agent.jobs import Job, LockHeld
from agent.registry import RegistryError, State
from serve.models.gate import GateDecision, decide
from serve.models.swap.base import CanaryFailed, SwapController, SwapError, SwapResult

log = logging.getLogger(__name__)


class Promotion:
    """The gate and the watcher over one swap controller."""

    def __init__(self, swap: SwapController) -> None:
        self.swap = swap
        self.registry = swap.registry
        self.settings = swap.settings
        self._wake = asyncio.Event()

    async def gate_and_promote(
        self, name: str, *, actor: str = "gate"
    ) -> tuple[GateDecision, SwapResult | None] | None:
        """The evaluation gate for a registered candidate, then the swap if it passes; None for a
        version that is no longer a candidate."""
        candidate = await asyncio.to_thread(self.registry.get, name)
        if candidate.state != State.CANDIDATE:
            return None
        decision = decide(candidate, self.settings.gate)
        if candidate.info.get("gate") != decision.record():
            await asyncio.to_thread(self.registry.annotate, name, "gate", decision.record(), actor=actor)
        if not decision.passed:
            reason = "; ".join(decision.reasons)
            await asyncio.to_thread(self.registry.reject, name, actor=actor, detail={"reason": reason})
            log.info("gate rejected %s: %s", name, reason)
            return decision, None
        try:
            result = await self.swap.promote_candidate(name, actor=actor, reason="passed the evaluation gate")
        except CanaryFailed:
            return decision, None
        return None if result is None else (decision, result)

    async def pending_candidates(self) -> list[str]:
        """Evaluated candidates still waiting: the retraining job's output, and ones that passed the
        gate but whose swap could not run yet. A failed gate or canary rejects a version, so it
        leaves this list."""
        versions = await asyncio.to_thread(self.registry.versions, "candidate")
        return [v.name for v in versions if v.info.get("evaluation")]

    def job_ended(self, job: Job) -> None:
        """A retraining job of this process ended: look now rather than at the next interval."""
        if job.detail.get("candidate"):
            self._wake.set()

    async def watch(self) -> None:
        """Gate and swap each new candidate, forever (one replica at a time, by the swap lock)."""
        while True:
            self._wake.clear()
            try:
                for name in await self.pending_candidates():
                    await self.gate_and_promote(name)
            except (LockHeld, SwapError, RegistryError) as exc:
                log.info("promotion watcher: %s", exc)
            except Exception:
                log.exception("promotion watcher pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.watch_interval_s)
