"""Which model version serves a task, on which engine, with which prompt: decided once, here.

A task (or a ``/v1/predict`` request) names a version or an alias, or nothing (the default
alias). ``ModelRouter.route`` resolves that name in one read of the registry into a ``Route``: the
registry version, the name the engine serves it under, the engine's URL where it is not the
primary (a full checkpoint swapped in blue/green runs on an engine of its own), and the system
prompt that version was trained with. The route is frozen and travels with the task to every
policy call (``policy_for``), so a task keeps its version, engine and prompt to its end whatever
is promoted meanwhile; as vLLM's ``OpenAIServingModels`` resolves a request's model name once.

A version whose engine holds another one (a full-weights swap in progress, or done without it) is
refused rather than served by the wrong weights. While a hot swap holds new episodes back, none
starts. Promotion and rollback come here too: the default alias of a service with a swap
controller (vLLM or the in-process engine) moves by a hot swap (load, canary, flip); any other
alias is a registry record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

from agent.jobs import JobStore
from agent.policy import Policy
from agent.prompt import PromptSettings
from agent.registry import DEFAULT_ALIAS, Kind, ModelRegistry, RegistryError
from serve.models.engines import Engines
from serve.models.swap import HOLD_LOCK, LOADED_ALIAS_PREFIX, SwapController, SwapResult


class UnknownModel(LookupError):
    """A model name that no registered version or alias has, or a version no engine serves."""


@dataclass(frozen=True)
class Route:
    """Where a task's policy calls go, resolved once when it starts."""

    version: str | None  # the registry's version; None: a service without one (the policy's own model)
    served_name: str | None  # the name the engine is asked for; None: the engine's default
    endpoint: str | None  # the engine's URL where it is not the primary (blue/green); None: the primary
    prompt: PromptSettings  # the system prompt the version was trained with, else the service's


class ModelRouter:
    """The one place that decides which version and which engine serve a task, and that moves a
    version into serving (used by the task runner, ``/v1/predict``, the model routes and ``uis1
    models``).

    ``policy`` is the engine tasks run on (None outside a service, e.g. the CLI: then only the
    registry's names are known); ``swap`` moves the default alias by a hot swap (None: promotions
    are registry records).
    """

    def __init__(
        self,
        registry: ModelRegistry | None,
        policy: Policy | None,
        prompt: PromptSettings,
        jobs: JobStore,
        *,
        swap: SwapController | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.prompt = prompt
        self.jobs = jobs
        self.swap = swap
        # Why screenshots travel as they do (``prompt.image_transport``), once the service knows.
        self.image_note: str | None = None
        self._hold = False
        self._hold_read_at = -1.0

    def route(self, name: str | None, *, swapping: bool = False) -> Route:
        """The route for a name a client sent (a version or an alias; None: the default). A name the
        registry does not know never reaches the policy server: with an empty registry, only the
        policy's own model is known. ``swapping``: a swap holds new episodes, so the engine may
        already hold the version the default alias is about to move to; the name only has to be
        known. Blocking (the registry): call it in a thread from the event loop.
        """
        if self.registry is None:
            return Route(None, name, None, self.prompt)
        try:
            version = self.registry.resolve(name)
        except RegistryError:
            own = self.policy.model_version if self.policy is not None else None
            if name is not None and name == own and not self.registry.versions():
                return Route(None, name, None, self.prompt)
            raise UnknownModel(f"no model version or alias {name!r}") from None
        if version is None:
            return Route(None, name, None, self.prompt)
        if version.kind != Kind.ADAPTER and not version.endpoint and not swapping:
            held = self.registry.aliases().get(LOADED_ALIAS_PREFIX + version.served_name)
            if held is not None and held != version.name:
                raise UnknownModel(
                    f"model version {version.name} is not being served: the engine serving "
                    f"{version.served_name!r} holds {held}"
                )
        return Route(version.name, version.served_name, version.endpoint, version.prompt_of(self.prompt))

    async def admit(self, name: str | None) -> None:
        """Refuse a task whose model name cannot be served (UnknownModel); the version is pinned
        later, when it starts. During an in-place swap the engine holds the new weights a few
        seconds before the default alias moves; a task submitted then waits (the hold) and is
        pinned to the new version, rather than refused.
        """
        swapping = await self.swap_holds(fresh=True)
        await asyncio.to_thread(self.route, name, swapping=swapping)

    def policy_for(self, route: Route) -> Policy:
        """The client of the engine that serves ``route`` (the primary's, or a blue/green engine's)."""
        if self.policy is None:
            raise RuntimeError("this router has no engine to send policy calls to")
        if isinstance(self.policy, Engines):
            return self.policy.client(route.endpoint)
        return self.policy

    def images_checked(self, *, as_captured: bool, why: str) -> None:
        """The policy server's image processor was checked: screenshots go to it as captured (it
        resizes as the service does), or the service keeps resizing them. Tasks that start later
        take the new transport with their route."""
        if as_captured:
            self.prompt = dataclasses.replace(self.prompt, image_transport="original")
        self.image_note = why

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
