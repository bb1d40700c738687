"""Which model version serves a task, and with which prompt.

A task names a version or an alias (or nothing: the default alias); it is pinned to the version
that name resolves to when it starts, and keeps it to its end. A version whose engine holds
another one (a full-weights swap in progress, or done without it) is refused rather than served
by the wrong weights. While a hot swap holds new episodes back, none starts.

Promotion and rollback come here too: the default alias of a service with a swap controller (vLLM
or the in-process engine) moves by a hot swap (load, canary, flip); any other alias is a registry
record.
"""

from __future__ import annotations

import asyncio
import time

from agent.jobs import JobStore
from agent.policy import Policy
from agent.prompt import PromptSettings
from agent.registry import DEFAULT_ALIAS, Kind, ModelRegistry, RegistryError
from serve.swap import HOLD_LOCK, LOADED_ALIAS_PREFIX, SwapController, SwapResult
from serve.task_request import TaskRequest, UnknownModel


class VersionRouter:
    """The one place that decides which version and which engine serve a task, and that moves a
    version into serving (used by the runner, the model routes and ``uis1 models``).

    ``policy`` is the engine tasks run on (None outside a service, e.g. the CLI: then only the
    registry's names are known).
    """

    def __init__(
        self, registry: ModelRegistry | None, policy: Policy | None, prompt: PromptSettings, jobs: JobStore
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.prompt = prompt
        self.jobs = jobs
        self.swap: SwapController | None = None  # set by the app once its engine is known
        # Why screenshots travel as they do (``prompt.image_transport``), once the service knows.
        self.image_note: str | None = None
        self._hold = False
        self._hold_read_at = -1.0

    def resolve(self, name: str | None, *, swapping: bool = False) -> tuple[str | None, str | None]:
        """The served name to ask the policy server for and the registry version, for a name a client
        sent (a version or an alias; None: the default). A name the registry does not know never
        reaches the policy server: with an empty registry, only the policy's own model is known.
        ``swapping``: a swap holds new episodes, so the engine may already hold the version the
        default alias is about to move to; the name only has to be known.
        """
        if self.registry is None:
            return name, None
        try:
            version = self.registry.resolve(name)
        except RegistryError:
            own = self.policy.model_version if self.policy is not None else None
            if name is not None and name == own and not self.registry.versions():
                return name, None
            raise UnknownModel(f"no model version or alias {name!r}") from None
        if version is None:
            return name, None
        if version.kind != Kind.ADAPTER and not version.endpoint and not swapping:
            held = self.registry.aliases().get(LOADED_ALIAS_PREFIX + version.served_name)
            if held is not None and held != version.name:
                raise UnknownModel(
                    f"model version {version.name} is not being served: the engine serving "
                    f"{version.served_name!r} holds {held}"
                )
        return version.served_name, version.name

    def route(self, request: TaskRequest) -> tuple[TaskRequest, str | None]:
        """Pin the task to a model version: the one it names (version or alias), else the default.

        Returns the request with the served name to ask the policy server for, and the version.
        """
        served, version = self.resolve(request.model)
        return request.model_copy(update={"model": served}), version

    async def admit(self, request: TaskRequest) -> None:
        """Refuse a task whose model name cannot be served (UnknownModel); the version is pinned
        later, when it starts. During an in-place swap the engine holds the new weights a few
        seconds before the default alias moves; a task submitted then waits (the hold) and is
        pinned to the new version, rather than refused.
        """
        swapping = await self.swap_holds(fresh=True)
        await asyncio.to_thread(self.resolve, request.model, swapping=swapping)

    def prompt_for(self, version: str | None) -> PromptSettings:
        """The prompt a task pinned to ``version`` runs with: the system prompt that version was
        trained with (the registry keeps it), else the service's."""
        if self.registry is None or version is None:
            return self.prompt
        try:
            return self.registry.get(version).prompt_of(self.prompt)
        except RegistryError:
            return self.prompt

    async def swap_holds(self, *, fresh: bool = False) -> bool:
        """Whether a hot swap holds new episodes back (read at most every half second)."""
        now = time.monotonic()
        if fresh or now - self._hold_read_at > 0.5:
            self._hold = await asyncio.to_thread(self.jobs.held, HOLD_LOCK)
            self._hold_read_at = now
        return self._hold

    async def promote(
        self, version: str, *, alias: str, actor: str, force: bool = False, reason: str | None = None
    ) -> SwapResult | None:
        """Serve ``version`` under ``alias``: the hot swap for the default alias where there is a
        swap controller (its result), else a registry record (None)."""
        if self.registry is None:
            raise RegistryError("this service keeps no model registry")
        if self.swap is not None and alias == DEFAULT_ALIAS:
            return await self.swap.promote(version, actor=actor, force=force, reason=reason)
        detail = {"reason": reason} if reason else {}
        await asyncio.to_thread(
            self.registry.promote, version, actor=actor, alias=alias, force=force, detail=detail
        )
        return None

    async def stage(self, version: str, *, actor: str) -> SwapResult:
        """Load and canary ``version`` ahead of its promotion (``SwapController.stage``)."""
        if self.swap is None:
            raise RegistryError("this service swaps no engine: there is nothing to stage into")
        return await self.swap.stage(version, actor=actor)

    async def rollback(self, *, alias: str, actor: str, reason: str | None = None) -> SwapResult | None:
        """Serve the version ``alias`` pointed at before; the rolled-back one is rejected."""
        if self.registry is None:
            raise RegistryError("this service keeps no model registry")
        if self.swap is not None and alias == DEFAULT_ALIAS:
            return await self.swap.rollback(actor=actor, reason=reason)
        detail = {"reason": reason} if reason else {}
        await asyncio.to_thread(self.registry.rollback, alias, actor=actor, detail=detail)
        return None
