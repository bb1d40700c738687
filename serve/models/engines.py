"""The vLLM engines a service sends policy calls to: the primary and any blue/green ones.

Most versions are served by the primary vLLM server (``UIS1_POLICY__BASE_URL``); a full checkpoint
swapped in blue/green runs on an engine of its own, whose URL the registry records on the version.
Which engine serves a task is decided by the router (``serve.models.routing``), once, into the
task's route; ``Engines`` only keeps one client per engine and hands out the one a route names.
Used as a ``Policy`` directly, it is the primary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import PromptSettings, Turn
from agent.vllm_policy import VllmPolicy, VllmSettings


class Engines:
    def __init__(
        self,
        settings: VllmSettings,
        *,
        prompt: PromptSettings | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.prompt = prompt
        self.on_retry = on_retry
        self.primary = VllmPolicy(settings, prompt=prompt, on_retry=on_retry)
        self._clients: dict[str, VllmPolicy] = {}

    @property
    def model_version(self) -> str:
        return self.primary.model_version

    def client(self, endpoint: str | None) -> VllmPolicy:
        """The client of the engine at ``endpoint`` (None, or the primary's URL: the primary)."""
        if endpoint is None or endpoint.rstrip("/") == self.settings.base_url.rstrip("/"):
            return self.primary
        if endpoint not in self._clients:
            self._clients[endpoint] = VllmPolicy(
                self.settings.model_copy(update={"base_url": endpoint}),
                prompt=self.prompt,
                on_retry=self.on_retry,
            )
        return self._clients[endpoint]

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        return await self.primary.predict(turns, sampling=sampling, model=model)

    async def health(self) -> bool:
        return await self.primary.health()

    async def served_models(self) -> list[str]:
        return await self.primary.served_models()

    async def aclose(self) -> None:
        await self.primary.aclose()
        for client in self._clients.values():
            await client.aclose()
