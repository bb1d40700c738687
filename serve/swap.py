"""The hot-swap controller: a model version goes into the running vLLM without dropping a request.

Every path ends with a canary (a fixed screenshot and goal, greedy; the answer must parse into an
action) before the ``default`` alias moves; a failed canary undoes what was done and rejects the
version, so the old one keeps serving. Running episodes stay on the version they started with.

- **Adapter** versions are loaded under their own served name from their own path, checked, then
  the alias flips; the previous adapter is unloaded once no running episode uses it.
- **Full** checkpoints, ``blue_green`` (when ``swap.launch_command`` is set): a second engine is
  started on the new weights under the version's name, health-checked and canaried; the version
  records the engine's URL, the alias flips, new episodes go there; the old engine is stopped once
  its episodes are done (only an engine this controller started; the primary is the operator's).
- **Full** checkpoints, ``in_place`` (one engine): new episodes are held in the queue (a lock row
  every replica honours), the engine's running episodes finish, then pause → reload → cache resets
  → resume (``agent.vllm_admin``) → canary; a failed canary reloads the previous weights. The
  ``loaded:SERVED_NAME`` alias says which version the engine holds, so a task that asks for an
  older version by name is refused instead of silently served by the new weights.

``uis1 models promote|rollback`` and ``POST /v1/models/promote|rollback`` run this; so does the
promotion watcher for candidates the retraining job registered (after the evaluation gate).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import shlex
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.jobs import JobStore, LockHeld
from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import PromptSettings, Screenshot, build_conversation
from agent.registry import DEFAULT_ALIAS, Kind, ModelRegistry, ModelVersion, RegistryError
from agent.store import TrajectoryStore
from agent.trajectory import EpisodeStatus
from agent.vllm_admin import VllmAdmin, VllmAdminError
from agent.vllm_policy import VllmPolicy, VllmSettings
from serve.gate import GateDecision, GateSettings, decide

if TYPE_CHECKING:
    from agent.local_policy import LocalModels

log = logging.getLogger(__name__)

HOLD_LOCK = "swap-hold"  # while held, no replica starts a new episode
SWAP_LOCK = "swap"  # one swap at a time across replicas
LOADED = "loaded:"  # alias prefix: the full version an engine holds, by served name


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
    watch_interval_s: float = Field(30.0, gt=0, description="How often the promotion watcher looks")
    gate: GateSettings = GateSettings()


class SwapError(RuntimeError):
    pass


class CanaryFailed(SwapError):
    pass


@dataclass
class SwapResult:
    version: str
    previous: str | None
    path: str  # adapter, in_place, blue_green, alias
    seconds: float
    canary: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "previous": self.previous,
            "path": self.path,
            "seconds": round(self.seconds, 3),
            "canary": self.canary,
        }


def canary_turns(goal: str, prompt: PromptSettings) -> list[Any]:
    """A fixed, realistic request: the simulated phone's home screen and a simple goal."""
    from devices.sim.phone import SimPhone

    phone = SimPhone("canary", clock="09:41")
    png = phone.screenshot_png()
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        size = image.size
    from agent.geometry import Size

    return build_conversation(goal, [Screenshot(png, Size(*size))], [], prompt)


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
        routes: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.jobs = JobStore(store.engine)
        self.prompt = prompt
        self.settings = settings or SwapSettings()
        self.owner = owner or socket.gethostname()
        self.routes_changed = routes or (lambda: None)  # this replica's router rereads the registry
        self._cleanups: set[asyncio.Task[None]] = set()
        self._hold_token: str | None = None  # an in-place swap's hold, released once the alias moved

    # -- entry points ------------------------------------------------------------------------------
    async def promote(
        self, name: str, *, actor: str, force: bool = False, reason: str | None = None
    ) -> SwapResult:
        """Load ``name`` into serving, canary it, and make it the default; undo on failure."""
        return await self._locked(lambda: self._promote(name, actor=actor, force=force, reason=reason))

    async def rollback(self, *, actor: str, reason: str | None = None) -> SwapResult:
        """Serve the version the default alias pointed at before its last move."""
        return await self._locked(lambda: self._rollback(actor=actor, reason=reason))

    async def gate_and_promote(
        self, name: str, *, actor: str = "gate"
    ) -> tuple[GateDecision, SwapResult | None]:
        """The evaluation gate for a registered candidate, then the swap if it passes."""
        candidate = await asyncio.to_thread(self.registry.get, name)
        decision = decide(candidate, self.settings.gate)
        await asyncio.to_thread(self.registry.annotate, name, "gate", decision.record(), actor=actor)
        if not decision.passed:
            await asyncio.to_thread(
                self.registry.reject, name, actor=actor, detail={"reason": "; ".join(decision.reasons)}
            )
            log.info("gate rejected %s: %s", name, "; ".join(decision.reasons))
            return decision, None
        try:
            result = await self.promote(name, actor=actor, reason="passed the evaluation gate")
        except CanaryFailed:
            return decision, None
        return decision, result

    async def pending_candidates(self) -> list[str]:
        """Evaluated candidates still waiting: the retraining job's output, and ones that passed the
        gate but whose swap could not run yet (another swap held the lock, episodes would not drain).
        A failed gate or canary rejects a version, so it leaves this list."""
        versions = await asyncio.to_thread(self.registry.versions, "candidate")
        return [v.name for v in versions if v.info.get("evaluation")]

    async def watch(self) -> None:
        """Gate and swap each new candidate, forever (one replica at a time, by the swap lock)."""
        while True:
            try:
                for name in await self.pending_candidates():
                    await self.gate_and_promote(name)
            except (LockHeld, SwapError, RegistryError) as exc:
                log.info("promotion watcher: %s", exc)
            except Exception:
                log.exception("promotion watcher pass failed")
            await asyncio.sleep(self.settings.watch_interval_s)

    async def aclose(self) -> None:
        for task in list(self._cleanups):
            task.cancel()

    # -- the swap ----------------------------------------------------------------------------------
    async def _locked(self, work: Any) -> SwapResult:
        token = f"swap-{uuid.uuid4().hex[:12]}"
        await asyncio.to_thread(
            self.jobs.acquire, SWAP_LOCK, token, ttl_s=self.settings.lock_ttl_s, owner=self.owner
        )
        try:
            result: SwapResult = await work()
            return result
        finally:
            await asyncio.to_thread(self.jobs.release, SWAP_LOCK, token)

    async def _promote(self, name: str, *, actor: str, force: bool, reason: str | None) -> SwapResult:
        version = await asyncio.to_thread(self.registry.get, name)
        if version.state == "rejected" and not force:
            raise SwapError(f"{name} was rejected; promote it with force to try again")
        current = await asyncio.to_thread(self.registry.promoted)
        start = time.perf_counter()
        try:
            path, canary = await self._serve(version, current)
            detail = {"path": path, "canary": canary} | ({"reason": reason} if reason else {})
            previous = await asyncio.to_thread(
                self.registry.promote, name, actor=actor, force=force, detail=detail
            )
            self.routes_changed()
            self._promoted(version)
        finally:
            await self._release_hold()
        result = SwapResult(name, previous, path, time.perf_counter() - start, canary)
        log.info("promoted %s (was %s) by %s in %.2fs", name, previous, path, result.seconds)
        if current is not None and current.name != name:
            self._retire_later(current, version)
        return result

    async def _rollback(self, *, actor: str, reason: str | None) -> SwapResult:
        aliases = await asyncio.to_thread(self.registry.aliases)
        if DEFAULT_ALIAS not in aliases:
            raise SwapError("no version is promoted: nothing to roll back")
        current = await asyncio.to_thread(self.registry.get, aliases[DEFAULT_ALIAS])
        previous = await asyncio.to_thread(self.registry.previous)
        if previous is None:
            raise SwapError(f"{current.name} has no previous version to roll back to")
        target = await asyncio.to_thread(self.registry.get, previous)
        start = time.perf_counter()
        try:
            path, canary = await self._serve(target, current, rollback=True)
            restored = await asyncio.to_thread(
                self.registry.rollback,
                actor=actor,
                detail={"reason": reason or "rolled back by hand", "path": path},
            )
            self.routes_changed()
            self._promoted(target)
        finally:
            await self._release_hold()
        result = SwapResult(restored, current.name, path, time.perf_counter() - start, canary)
        log.info("rolled back from %s to %s by %s in %.2fs", current.name, restored, path, result.seconds)
        self._retire_later(current, target)
        return result

    async def _release_hold(self) -> None:
        token, self._hold_token = self._hold_token, None
        if token is not None:
            await asyncio.to_thread(self.jobs.release, HOLD_LOCK, token)

    # -- what a kind of engine does ----------------------------------------------------------------
    async def _serve(
        self, version: ModelVersion, current: ModelVersion | None, *, rollback: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """Make ``version`` answer under its served name and canary it; returns (path, canary)."""
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
            while await asyncio.to_thread(self.store.count, EpisodeStatus.RUNNING, model_version=old.name):
                await asyncio.sleep(1.0)
            if (await asyncio.to_thread(self.registry.aliases)).get(DEFAULT_ALIAS) == old.name:
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
            await asyncio.to_thread(
                self.registry.reject, version.name, actor="canary", detail={"reason": reason}
            )
        except RegistryError as exc:
            log.warning("could not mark %s rejected: %s", version.name, exc)

    # -- the canary --------------------------------------------------------------------------------
    async def _check(
        self, version: ModelVersion, ask: Callable[[list[Any], SamplingSettings], Awaitable[PolicyResult]]
    ) -> dict[str, Any]:
        """The canary: ``ask`` sends the fixed request to the candidate, greedy; the answer must parse."""
        # the candidate is asked as its tasks will ask it
        turns = canary_turns(self.settings.canary_goal, version.prompt_of(self.prompt))
        start = time.perf_counter()
        try:
            result = await ask(
                turns, SamplingSettings(temperature=0.0, max_tokens=self.settings.canary_max_tokens)
            )
        except Exception as exc:
            raise CanaryFailed(f"the canary request to {version.name} failed: {exc}") from exc
        seconds = time.perf_counter() - start
        record = {
            "ok": result.parsed.action is not None,
            "seconds": round(seconds, 3),
            "raw": result.raw[:500],
        }
        if result.parsed.action is None:
            why = result.parsed.error.reason.value if result.parsed.error else "no action"
            raise CanaryFailed(
                f"the canary answer of {version.name} does not parse ({why}): {result.raw[:200]!r}"
            )
        record["action"] = result.parsed.action.to_dict()
        return record


class HotSwapController(SwapController):
    """Swaps into vLLM: adapters loaded beside the others, full weights in place or blue/green."""

    def __init__(
        self,
        store: TrajectoryStore,
        registry: ModelRegistry,
        policy: VllmSettings,
        prompt: PromptSettings,
        settings: SwapSettings | None = None,
        *,
        owner: str = "",
        routes: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(store, registry, prompt, settings, owner=owner, routes=routes)
        self.policy = policy
        self.engines: dict[str, subprocess.Popen[bytes]] = {}  # blue/green engines this controller started

    def _strategy(self) -> str:
        if self.settings.strategy == "auto":
            return "blue_green" if self.settings.launch_command else "in_place"
        return self.settings.strategy

    async def _serve(
        self, version: ModelVersion, current: ModelVersion | None, *, rollback: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """Make ``version`` answer under its served name and canary it; returns (path, canary)."""
        if version.kind == Kind.ADAPTER:
            return "adapter", await self._serve_adapter(version, rollback=rollback)
        if version.endpoint or (self._strategy() == "blue_green" and not self._is_loaded(version)):
            return "blue_green", await self._serve_blue_green(version)
        if self._is_loaded(version):
            return "alias", await self._canary(version, self._url(version))
        return "in_place", await self._serve_in_place(version, current)

    def _url(self, version: ModelVersion) -> str:
        return version.endpoint or self.policy.base_url

    def _admin(self, url: str) -> VllmAdmin:
        return VllmAdmin(url, api_key=self.policy.api_key)

    def _is_loaded(self, version: ModelVersion) -> bool:
        """A full version is in the primary engine already (it is what the engine holds)."""
        held = self.registry.aliases().get(LOADED + version.served_name)
        if held is not None:
            return held == version.name
        return version.kind == Kind.BASE  # an engine started on a base model holds it from the start

    # -- adapters ----------------------------------------------------------------------------------
    async def _serve_adapter(self, version: ModelVersion, *, rollback: bool) -> dict[str, Any]:
        url = self._url(version)
        admin = self._admin(url)
        try:
            served = await asyncio.to_thread(admin.served_models)
            loaded_here = version.served_name not in served
            if loaded_here:
                await asyncio.to_thread(admin.load_adapter, version.served_name, version.adapter or "")
        except VllmAdminError as exc:
            admin.close()
            await self._reject(version, f"loading the adapter failed: {exc}", rollback)
            raise SwapError(str(exc)) from exc
        try:
            return await self._canary(version, url)
        except CanaryFailed as exc:
            if loaded_here:
                await asyncio.to_thread(_quietly, admin.unload_adapter, version.served_name)
            await self._reject(version, str(exc), rollback)
            raise
        finally:
            admin.close()

    # -- full weights, one engine ------------------------------------------------------------------
    async def _serve_in_place(self, version: ModelVersion, current: ModelVersion | None) -> dict[str, Any]:
        if (
            current is not None
            and current.kind != Kind.ADAPTER
            and current.served_name != version.served_name
        ):
            raise SwapError(
                f"{version.name} is served as {version.served_name!r} but the engine serves "
                f"{current.served_name!r}: an in-place swap keeps the engine's name"
            )
        if not version.base:
            raise SwapError(f"{version.name} has no checkpoint path")
        token = f"hold-{uuid.uuid4().hex[:12]}"
        await asyncio.to_thread(
            self.jobs.acquire, HOLD_LOCK, token, ttl_s=self.settings.lock_ttl_s, owner=self.owner
        )
        admin = self._admin(self.policy.base_url)
        previous_weights = None
        try:
            await asyncio.sleep(self.settings.hold_grace_s)  # every replica has seen the hold
            await self._drain()
            previous_weights = self._weights_in_engine(version.served_name, current)
            await asyncio.to_thread(admin.reload_weights, version.base)
            await asyncio.to_thread(
                self.registry.set_alias, LOADED + version.served_name, version.name, actor="swap"
            )
            canary = await self._canary(version, self.policy.base_url)
        except (CanaryFailed, VllmAdminError) as exc:
            if previous_weights is not None:  # put back what the engine held
                try:
                    await asyncio.to_thread(admin.reload_weights, previous_weights[1])
                    await asyncio.to_thread(
                        self.registry.set_alias,
                        LOADED + version.served_name,
                        previous_weights[0],
                        actor="swap",
                    )
                except VllmAdminError as again:
                    log.error("could not reload the previous weights %s: %s", previous_weights[1], again)
            await asyncio.to_thread(self.jobs.release, HOLD_LOCK, token)
            if isinstance(exc, CanaryFailed):
                await self._reject(version, str(exc), False)
                raise
            raise SwapError(f"in-place reload of {version.name} failed: {exc}") from exc
        except BaseException:
            await asyncio.to_thread(self.jobs.release, HOLD_LOCK, token)
            raise
        finally:
            admin.close()
        # New episodes stay held until the alias has moved too (the caller releases the hold):
        # one that started in between would ask for the old version, which the engine no longer has.
        self._hold_token = token
        return canary

    def _weights_in_engine(self, served_name: str, current: ModelVersion | None) -> tuple[str, str] | None:
        """(version, checkpoint path) the engine holds now, to restore if the canary fails."""
        held = self.registry.aliases().get(LOADED + served_name)
        version = self.registry.get(held) if held else current
        if version is None or version.kind == Kind.ADAPTER or not version.base:
            return None
        return version.name, version.base

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while True:
            running = await asyncio.to_thread(self.store.count, EpisodeStatus.RUNNING)
            if not running:
                return
            if time.monotonic() > deadline:
                raise SwapError(
                    f"{running} episode(s) still running after {self.settings.drain_timeout_s:.0f}s; "
                    "the swap is called off and they keep the old weights"
                )
            await asyncio.sleep(0.25)

    # -- full weights, a second engine -------------------------------------------------------------
    async def _serve_blue_green(self, version: ModelVersion) -> dict[str, Any]:
        url = version.endpoint
        if url is None or not self._admin(url).healthy():
            if not self.settings.launch_command:
                raise SwapError(
                    f"{version.name} needs an engine of its own and swap.launch_command is not set"
                )
            url = await asyncio.to_thread(self._launch, version)
        try:
            canary = await self._canary(version, url)
        except CanaryFailed as exc:
            self._stop_engine(url)
            await self._reject(version, str(exc), False)
            raise
        await asyncio.to_thread(self.registry.set_endpoint, version.name, url, actor="swap")
        return canary

    def _launch(self, version: ModelVersion) -> str:
        with socket.socket() as sock:
            sock.bind((self.settings.launch_host, 0))
            port = sock.getsockname()[1]
        assert self.settings.launch_command is not None
        command = self.settings.launch_command.format(
            weights=shlex.quote(version.base or ""), port=port, served_name=shlex.quote(version.served_name)
        )
        url = f"http://{self.settings.launch_host}:{port}"
        log.info("starting an engine for %s: %s", version.name, command)
        proc = subprocess.Popen(
            shlex.split(command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self.engines[url] = proc
        admin = self._admin(url)
        try:
            deadline = time.monotonic() + self.settings.launch_timeout_s
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise SwapError(f"the engine for {version.name} exited with {proc.returncode}: {command}")
                if admin.healthy():
                    return url
                time.sleep(1.0)
            raise SwapError(
                f"the engine for {version.name} was not healthy after {self.settings.launch_timeout_s}s"
            )
        except SwapError:
            self._stop_engine(url)
            raise
        finally:
            admin.close()

    def _stop_engine(self, url: str) -> None:
        proc = self.engines.pop(url, None)
        if proc is None:
            return  # not ours to stop
        import os
        import signal

        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        log.info("stopped the engine at %s", url)

    # -- after a swap ------------------------------------------------------------------------------
    def _retires(self, old: ModelVersion, new: ModelVersion) -> bool:
        """The old adapter is unloaded, the old blue/green engine stopped."""
        return old.kind == Kind.ADAPTER or bool(old.endpoint and old.endpoint != new.endpoint)

    async def _retire(self, old: ModelVersion) -> None:
        if old.kind == Kind.ADAPTER:
            admin = self._admin(self._url(old))
            await asyncio.to_thread(_quietly, admin.unload_adapter, old.served_name)
            admin.close()
        elif old.endpoint:
            self._stop_engine(old.endpoint)

    # -- the canary --------------------------------------------------------------------------------
    async def _canary(self, version: ModelVersion, url: str) -> dict[str, Any]:
        client = VllmPolicy(
            self.policy.model_copy(update={"base_url": url, "max_retries": 1}), prompt=self.prompt
        )
        try:
            return await self._check(
                version,
                lambda turns, sampling: client.predict(turns, sampling=sampling, model=version.served_name),
            )
        finally:
            await client.aclose()


class LocalSwapController(SwapController):
    """Swaps into the in-process engine (``agent.local_policy.LocalModels``), for CPU-only hosts and
    the demo: each version, adapter or full weights, is loaded beside the ones serving under its own
    served name, canaried, and only then does the default alias move; running episodes keep the
    version they started with, and the old one is unloaded once none uses it. No lock holds new
    episodes back: nothing is reloaded under a version that is serving."""

    def __init__(
        self,
        store: TrajectoryStore,
        registry: ModelRegistry,
        engine: LocalModels,
        prompt: PromptSettings,
        settings: SwapSettings | None = None,
        *,
        owner: str = "",
        routes: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(store, registry, prompt, settings, owner=owner, routes=routes)
        self.engine = engine

    async def _serve(
        self, version: ModelVersion, current: ModelVersion | None, *, rollback: bool = False
    ) -> tuple[str, dict[str, Any]]:
        if not version.base:
            raise SwapError(f"{version.name} has no checkpoint path")
        wanted = (version.base, version.adapter if version.kind == Kind.ADAPTER else None)
        held = self.engine.holds(version.served_name)
        if held is not None and held != wanted:
            raise SwapError(
                f"{version.name} is served as {version.served_name!r}, which another loaded "
                f"version ({held[1] or held[0]}) serves here; register it with a served name of its own"
            )
        loaded_here = held is None
        if loaded_here:
            try:
                await asyncio.to_thread(self.engine.load, version.served_name, *wanted)
            except Exception as exc:
                await self._reject(version, f"loading it failed: {exc}", rollback)
                raise SwapError(f"loading {version.name} failed: {exc}") from exc
        try:
            canary = await self._check(
                version,
                lambda turns, sampling: self.engine.predict(
                    turns, sampling=sampling, model=version.served_name
                ),
            )
        except CanaryFailed as exc:
            if loaded_here:
                self.engine.unload(version.served_name)
            await self._reject(version, str(exc), rollback)
            raise
        return "local", canary

    def _promoted(self, version: ModelVersion) -> None:
        self.engine.set_default(version.served_name)

    def _retires(self, old: ModelVersion, new: ModelVersion) -> bool:
        return old.served_name != new.served_name

    async def _retire(self, old: ModelVersion) -> None:
        if old.served_name != self.engine.model_version:
            self.engine.unload(old.served_name)
            log.info("unloaded %s", old.name)


def _quietly(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except VllmAdminError as exc:
        log.warning("%s", exc)
