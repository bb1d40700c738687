"""Hot swaps into the in-process policy (``agent.local_policy.LocalModels``): CPU-only hosts, the demo."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agent.prompt import PromptSettings
from agent.registry import Kind, ModelRegistry, ModelVersion
from agent.store import TrajectoryStore

if TYPE_CHECKING:
    from agent.local_policy import LocalModels

from serve.models.swap.base import CanaryFailed, SwapController, SwapError, SwapSettings

log = logging.getLogger(__name__)


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
    ) -> None:
        super().__init__(store, registry, prompt, settings, owner=owner)
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
                with self._phase("load"):
                    await self._off(self.engine.load, version.served_name, *wanted)
            except Exception as exc:
                await self._reject(version, f"loading it failed: {exc}", rollback)
                raise SwapError(f"loading {version.name} failed: {exc}") from exc
        try:
            canary = await self._check(
                version,
                lambda turns, sampling: self.engine.predict(
                    turns, sampling=sampling, model=version.served_name
                ),
                lambda turns, count: self.engine.score(turns, count, model=version.served_name),
                "local",
            )
        except CanaryFailed as exc:
            if loaded_here:
                self.engine.unload(version.served_name)
            await self._reject(version, str(exc), rollback)
            raise
        return "local", canary

    async def _still_loaded(self, version: ModelVersion) -> bool:
        wanted = (version.base, version.adapter if version.kind == Kind.ADAPTER else None)
        return self.engine.holds(version.served_name) == wanted

    def _promoted(self, version: ModelVersion) -> None:
        self.engine.set_default(version.served_name)

    def _retires(self, old: ModelVersion, new: ModelVersion) -> bool:
        return old.served_name != new.served_name

    async def _retire(self, old: ModelVersion) -> None:
        if old.served_name != self.engine.model_version:
            self.engine.unload(old.served_name)
            log.info("unloaded %s", old.name)
