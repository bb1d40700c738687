"""What every hot swap does, whatever the engine: one swap at a time across replicas, the canary
and the weights check before the ``default`` alias moves, rejection and rollback, and retiring the
old version once no running episode uses it (the gate that decides on candidates is
``serve.models.promotion``). The engines' own steps are in
``serve.models.swap.vllm`` and ``serve.models.swap.local``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from agent import fingerprint
from agent.jobs import JobStore
from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import PromptSettings
from agent.registry import DEFAULT_ALIAS, ModelRegistry, ModelVersion, RegistryError, State
from agent.store import TrajectoryStore
from agent.trajectory import EpisodeStatus
from serve.models.gate import GateSettings
from serve.models.swap import canary

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

HOLD_LOCK = "swap-hold"  # while held, no replica starts a new episode
SWAP_LOCK = "swap"  # one swap at a time across replicas
LOADED_ALIAS_PREFIX = "loaded:"  # alias prefix: the full version an engine holds, by served name
CHECK_KEY = "fingerprint_check"  # a version's info: its last swap's weights check (verified, why, at)


class SwapSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    strategy: Literal["auto", "in_place", "blue_green"] = Field(
        "auto", description="Full checkpoints: in place, blue/green, or auto (blue/green when it can launch)"
    )
    canary_goal: str = Field("Open the Settings app", description="Goal of the canary request")
    canary_max_tokens: int = Field(256, gt=0, description="Token limit of the canary request")
    drain_timeout_s: float = Field(
        900.0, gt=0, description="In place: how long running episodes may take to finish"
    )
    hold_grace_s: float = Field(
        2.0, ge=0, description="Replicas see the hold within this (they poll every 0.5 s)"
    )
    lock_ttl_s: float = Field(1800.0, gt=0, description="A dead swapper's lock lapses after this")
    # Blue/green: the command that starts a second engine; {weights}, {port} and {served_name} are
    # filled in, e.g. "vllm serve {weights} --port {port} --served-model-name {served_name}".
    launch_command: str | None = Field(
        None, description="Blue/green: command starting a second engine ({weights}, {port}, {served_name})"
    )
    launch_host: str = Field("127.0.0.1", description="Blue/green: host the launched engine listens on")
    launch_timeout_s: float = Field(
        900.0, gt=0, description="Blue/green: how long a new engine may take to start"
    )
    # The old adapter is unloaded (the old blue/green engine stopped) no sooner than this after the
    # swap, and only once no running episode uses it: requests that chose it just before the flip
    # are still on their way.
    retire_after_s: float = Field(
        30.0, ge=0, description="Old adapters/engines are retired no sooner than this"
    )
    auto_promote: bool = Field(True, description="Gate and swap the candidates the retraining job registers")
    stage_ttl_s: float = Field(
        3600.0,
        gt=0,
        description="A staged version (loaded and canaried ahead) is promoted without a canary this long",
    )
    watch_interval_s: float = Field(30.0, gt=0, description="How often the promotion watcher looks")
    fingerprint_check: bool = Field(
        True,
        description="Before the alias moves, the engine's answer to the weights probe must match the training "
        "job's record and differ from the previous version's (agent.fingerprint)",
    )
    fingerprint_tolerance: float = Field(
        fingerprint.DEFAULT_TOLERANCE,
        gt=0,
        description="Mean |log-prob difference| per probe token that still counts as the same weights",
    )
    gate: GateSettings = GateSettings()


class SwapError(RuntimeError):
    pass


class CanaryFailed(SwapError):
    pass


class _NoLongerCandidate(Exception):
    """The gate's swap found its version promoted or rejected already (by the other path)."""


@dataclass
class SwapResult:
    version: str
    previous: str | None
    path: str  # adapter, in_place, blue_green, alias; staged (promote after a stage), held (rollback)
    seconds: float
    canary: dict[str, Any] = field(default_factory=dict)
    # Where the seconds went: load (the engine takes the weights), canary, record (the alias flip).
    phases: dict[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "previous": self.previous,
            "path": self.path,
            "seconds": round(self.seconds, 3),
            "canary": self.canary,
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
        }


class SwapController:
    """What every hot swap does, whatever engine serves the versions: one swap at a time across
    replicas, the canary, the registry's promote and rollback, the gate, and retiring the old
    version once its episodes are done. Subclasses say how a version is made to serve (``_serve``)
    and how an old one is retired (``_retires``, ``_retire``)."""

    def __init__(
        self,
        store: TrajectoryStore,
        registry: ModelRegistry,
        prompt: PromptSettings,
        settings: SwapSettings | None = None,
        *,
        owner: str = "",
    ) -> None:
        self.store = store
        self.registry = registry
        self.jobs = JobStore(store.engine)
        self.prompt = prompt
        self.settings = settings or SwapSettings()
        self.owner = owner or socket.gethostname()
        self._cleanups: set[asyncio.Task[None]] = set()
        # The canary's screen is drawn now, off the caller's thread, not in the first swap.
        threading.Thread(target=canary.screen, name="canary-screen", daemon=True).start()
        self.phases: dict[str, float] = {}  # of the swap under way (see SwapResult.phases)
        self._hold_token: str | None = None  # an in-place swap's hold, released once the alias moved
        # The swap's blocking calls (database, engine admin) run on threads of their own: on the
        # event loop's shared pool they queue behind the requests being served, and a promote under
        # load spent most of its time waiting there (BENCHMARKS.md section 3).
        self._lane = ThreadPoolExecutor(max_workers=2, thread_name_prefix="swap")

    # -- entry points ------------------------------------------------------------------------------
    async def promote(
        self, name: str, *, actor: str, force: bool = False, reason: str | None = None
    ) -> SwapResult:
        """Load ``name`` into serving, canary it, and make it the default; undo on failure."""
        return await self._locked(lambda: self._promote(name, actor=actor, force=force, reason=reason))

    async def rollback(self, *, actor: str, reason: str | None = None) -> SwapResult:
        """Serve the version the default alias pointed at before its last move."""
        return await self._locked(lambda: self._rollback(actor=actor, reason=reason))

    async def stage(self, name: str, *, actor: str = "system") -> SwapResult:
        """Load ``name`` beside the version serving and canary it, without moving the default alias:
        a promote within ``stage_ttl_s``, while it is still loaded, is then the alias flip alone.
        A version that would replace the engine's only weights (in place) cannot be staged."""
        return await self._locked(lambda: self._stage(name, actor=actor))

    async def promote_candidate(self, name: str, *, actor: str, reason: str) -> SwapResult | None:
        """Promote ``name`` only while it is still a candidate (the gate passed it); None when it
        was promoted or rejected meanwhile (by another replica). Raises like ``promote``."""
        try:
            return await self._locked(
                lambda: self._promote(name, actor=actor, force=False, reason=reason, candidate=True)
            )
        except _NoLongerCandidate:
            return None

    async def aclose(self) -> None:
        for task in list(self._cleanups):
            task.cancel()
        self._lane.shutdown(wait=False, cancel_futures=True)

    async def _off(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``call`` on the swap's own threads, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(
            self._lane, functools.partial(call, *args, **kwargs)
        )

    # -- the swap ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Time a phase of the swap under way (``SwapResult.phases``)."""
        start = time.perf_counter()
        yield
        self.phases[name] = time.perf_counter() - start

    async def _locked(self, work: Any) -> SwapResult:
        """``work`` holding the swap lock (across replicas); the wait for it is a phase of its own."""
        token = f"swap-{uuid.uuid4().hex[:12]}"
        start = time.perf_counter()
        await self._off(self.jobs.acquire, SWAP_LOCK, token, ttl_s=self.settings.lock_ttl_s, owner=self.owner)
        waited = time.perf_counter() - start
        try:
            result: SwapResult = await work()
            result.phases = {"lock": waited, **result.phases}
            return result
        finally:
            await self._off(self.jobs.release, SWAP_LOCK, token)

    async def _read(
        self, name: str, *, force: bool, refused: str
    ) -> tuple[ModelVersion, ModelVersion | None]:
        """The version to serve and the one the default alias names now; a rejected version is
        refused (``refused`` says what to do) unless ``force``."""
        with self._phase("read"):
            version = await self._off(self.registry.get, name)
            if version.state == "rejected" and not force:
                raise SwapError(f"{name} was rejected; {refused}")
            return version, await self._off(self.registry.promoted)

    async def _promote(
        self, name: str, *, actor: str, force: bool, reason: str | None, candidate: bool = False
    ) -> SwapResult:
        """The swap, under the lock; with ``candidate``, only while ``name`` is still a candidate."""
        start = time.perf_counter()
        self.phases = {}
        version, current = await self._read(name, force=force, refused="promote it with force to try again")
        if candidate and version.state != State.CANDIDATE:
            raise _NoLongerCandidate(name)
        try:
            staged = await self._fresh_stage(version)
            if staged is not None:  # loaded and canaried ahead: nothing to do but the flip
                path, canary = "staged", staged
            else:
                path, canary = await self._serve(version, current)
            detail = {"path": path, "canary": canary} | ({"reason": reason} if reason else {})
            with self._phase("record"):
                if "fingerprint" in canary:  # what /readyz and `uis1 models list` show of it
                    await self._off(self._annotate_check, name, canary["fingerprint"], actor)
                previous = await self._off(
                    self.registry.promote, name, actor=actor, force=force, detail=detail
                )
                self._promoted(version)
        finally:
            await self._release_hold()
        result = SwapResult(name, previous, path, time.perf_counter() - start, canary, self.phases)
        log.info("promoted %s (was %s) by %s in %.2fs", name, previous, path, result.seconds)
        if current is not None and current.name != name:
            self._retire_later(current, version)
        return result

    async def _stage(self, name: str, *, actor: str) -> SwapResult:
        start = time.perf_counter()
        self.phases = {}
        version, current = await self._read(name, force=False, refused="it cannot be staged")
        if not await self._stageable(version):
            raise SwapError(
                f"{name} would replace the weights the engine serves (an in-place swap): promote it directly"
            )
        path, canary = await self._serve(version, current)
        record = {"path": path, "canary": canary, "at": time.time()}
        await self._off(self.registry.annotate, name, "staged", record, actor=actor)
        result = SwapResult(
            name, current.name if current else None, path, time.perf_counter() - start, canary, self.phases
        )
        log.info("staged %s by %s in %.2fs; promoting it is the alias flip", name, path, result.seconds)
        return result

    async def _fresh_stage(self, version: ModelVersion) -> dict[str, Any] | None:
        """The canary of the version's stage, when it was staged within ``stage_ttl_s`` and is
        still loaded; else None (it is loaded and canaried now)."""
        staged = version.info.get("staged")
        if (
            not isinstance(staged, dict)
            or time.time() - float(staged.get("at", 0)) > self.settings.stage_ttl_s
        ):
            return None
        return dict(staged["canary"]) if await self._still_held(version) else None

    async def _still_held(self, version: ModelVersion) -> bool:
        """Whether the engine still holds ``version`` as it was last canaried (a stage, or a
        rollback within the old version's retirement grace or to a base never unloaded): then
        moving the alias is all the swap needs, however loaded the engine is. A phase of its own."""
        with self._phase("check"):
            return await self._still_loaded(version)

    async def _rollback(self, *, actor: str, reason: str | None) -> SwapResult:
        aliases = await self._off(self.registry.aliases)
        if DEFAULT_ALIAS not in aliases:
            raise SwapError("no version is promoted: nothing to roll back")
        current = await self._off(self.registry.get, aliases[DEFAULT_ALIAS])
        previous = await self._off(self.registry.previous)
        if previous is None:
            raise SwapError(f"{current.name} has no previous version to roll back to")
        target = await self._off(self.registry.get, previous)
        start = time.perf_counter()
        self.phases = {}
        try:
            canary: dict[str, Any]
            if await self._still_held(target):  # it passed its canary when it served; no new one
                path, canary = "held", {"ok": True, "skipped": "the engine still holds it"}
            else:
                path, canary = await self._serve(target, current, rollback=True)
            with self._phase("record"):
                if "fingerprint" in canary:
                    await self._off(self._annotate_check, target.name, canary["fingerprint"], actor)
                restored = await self._off(
                    self.registry.rollback,
                    actor=actor,
                    detail={"reason": reason or "rolled back by hand", "path": path},
                )
                self._promoted(target)
        finally:
            await self._release_hold()
        result = SwapResult(restored, current.name, path, time.perf_counter() - start, canary, self.phases)
        log.info("rolled back from %s to %s by %s in %.2fs", current.name, restored, path, result.seconds)
        self._retire_later(current, target)
        return result

    def _annotate_check(self, name: str, check: dict[str, Any], actor: str) -> None:
        self.registry.annotate(
            name,
            CHECK_KEY,
            {"verified": bool(check.get("verified")), "why": check.get("why"), "at": time.time()},
            actor=actor,
        )

    async def _release_hold(self) -> None:
        token, self._hold_token = self._hold_token, None
        if token is not None:
            await self._off(self.jobs.release, HOLD_LOCK, token)

    # -- what a kind of engine does ----------------------------------------------------------------
    async def _serve(
        self, version: ModelVersion, current: ModelVersion | None, *, rollback: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """Make ``version`` answer under its served name and canary it; returns (path, canary)."""
        raise NotImplementedError

    async def _stageable(self, version: ModelVersion) -> bool:
        """Whether ``version`` can be loaded beside the one serving (the engine's own rule)."""
        return True

    async def _still_loaded(self, version: ModelVersion) -> bool:
        """Whether the engine holds ``version`` now, under its served name, with its own weights
        (not other weights loaded in place under that name)."""
        raise NotImplementedError

    def _retires(self, old: ModelVersion, new: ModelVersion) -> bool:
        """Whether ``old`` holds something to give back once ``new`` serves."""
        return False

    async def _retire(self, old: ModelVersion) -> None:
        """Give back what ``old`` holds (it no longer serves, and no running episode uses it)."""

    def _promoted(self, version: ModelVersion) -> None:
        """Called once the default alias points at ``version``."""

    # -- after a swap ------------------------------------------------------------------------------
    def _retire_later(self, old: ModelVersion, new: ModelVersion) -> None:
        """Retire the old version once no running episode uses it (and it was not rolled back to)."""
        if not self._retires(old, new):
            return

        async def retire() -> None:
            await asyncio.sleep(self.settings.retire_after_s)
            while await self._off(self.store.count, EpisodeStatus.RUNNING, model_version=old.name):
                await asyncio.sleep(1.0)
            if (await self._off(self.registry.aliases)).get(DEFAULT_ALIAS) == old.name:
                return  # rolled back to it in the meantime
            await self._retire(old)

        task = asyncio.create_task(retire(), name=f"retire-{old.name}")
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _reject(self, version: ModelVersion, reason: str, rollback: bool) -> None:
        log.warning("%s failed its swap: %s", version.name, reason)
        if rollback:
            return  # the version rolled back to stays what it was; the caller reports the failure
        try:
            await self._off(self.registry.reject, version.name, actor="canary", detail={"reason": reason})
        except RegistryError as exc:
            log.warning("could not mark %s rejected: %s", version.name, exc)

    # -- the canary --------------------------------------------------------------------------------
    async def _check(
        self,
        version: ModelVersion,
        ask: Callable[[list[Any], SamplingSettings], Awaitable[PolicyResult]],
        score: Callable[[list[Any], int], Awaitable[list[float]]],
        engine: str,
    ) -> dict[str, Any]:
        """The canary, asked as the version's tasks will ask it, then the weights fingerprint: the
        engine must answer the probe as the training job recorded (``agent.fingerprint``). Their
        seconds are phases of the swap; either failing raises ``CanaryFailed`` with the reason."""
        prompt = version.prompt_of(self.prompt)
        record = await canary.check(
            version, ask, self.settings.canary_goal, self.settings.canary_max_tokens, prompt
        )
        self.phases["canary"] = record["seconds"]
        if not record["ok"]:
            raise CanaryFailed(record["why"])
        if self.settings.fingerprint_check:
            with self._phase("fingerprint"):
                verdict = await self._fingerprint(version, score, engine, prompt)
            record["fingerprint"] = {
                "verified": verdict.detail.get("verified", False),
                "why": verdict.why,
            } | {k: v for k, v in verdict.detail.items() if k != "verified"}
            if not verdict.ok:
                raise CanaryFailed(verdict.why)
        return record

    async def _fingerprint(
        self,
        version: ModelVersion,
        score: Callable[[list[Any], int], Awaitable[list[float]]],
        engine: str,
        prompt: PromptSettings,
    ) -> fingerprint.Verdict:
        recorded = fingerprint.Fingerprint.of(version.info.get(fingerprint.INFO_KEY))
        if recorded is None:  # nothing to compare with: the engine is not asked
            why = f"{version.name} has no recorded fingerprint: served unverified"
            return fingerprint.Verdict(True, why, {"verified": False})
        try:
            values = await score(fingerprint.probe(prompt), fingerprint.TOKENS)
        except Exception as exc:  # an engine that cannot answer the probe: said, not fatal
            why = (
                f"the weights probe to {version.name} failed ({type(exc).__name__}: {exc}): served unverified"
            )
            return fingerprint.Verdict(True, why[:500], {"verified": False})
        served = fingerprint.Fingerprint(tuple(values), fingerprint.probe_key(prompt), engine)
        previous = await self._off(self.registry.promoted)
        if previous is not None and previous.name == version.name:
            previous = None
        return fingerprint.verify(
            served,
            recorded,
            fingerprint.Fingerprint.of(previous.info.get(fingerprint.INFO_KEY)) if previous else None,
            name=version.name,
            previous_name=previous.name if previous else None,
            tolerance=self.settings.fingerprint_tolerance,
        )
