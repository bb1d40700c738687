"""Requests go to the engine that serves the asked-for model.

Most versions are served by the primary vLLM server (``UIS1_POLICY__BASE_URL``); a full checkpoint
swapped in blue/green runs on an engine of its own, whose URL the registry records on the
version. ``RoutedPolicy`` keeps one client per engine and a map of served names to engines, read
from the registry at most every few seconds (and at once after a swap on this replica).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import PromptSettings, Turn
from agent.registry import ModelRegistry
from agent.vllm_policy import VllmPolicy, VllmSettings


class RoutedPolicy:
    def __init__(
        self,
        settings: VllmSettings,
        registry: ModelRegistry,
        *,
        prompt: PromptSettings | None = None,
        refresh_s: float = 5.0,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.prompt = prompt
        self.refresh_s = refresh_s
        self.on_retry = on_retry
        self.primary = VllmPolicy(settings, prompt=prompt, on_retry=on_retry)
        self._clients: dict[str, VllmPolicy] = {}
        self._routes: dict[str, str] = {}
        self._read_at = -1e9

    @property
    def model_version(self) -> str:
        return self.primary.model_version

    def invalidate(self) -> None:
        self._read_at = -1e9

    async def _endpoint(self, model: str | None) -> str | None:
        if time.monotonic() - self._read_at > self.refresh_s:
            versions = await asyncio.to_thread(self.registry.versions)
            self._routes = {v.served_name: v.endpoint for v in versions if v.endpoint}
            self._read_at = time.monotonic()
        return self._routes.get(model) if model else None

    def client_for(self, endpoint: str | None) -> VllmPolicy:
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
        client = self.client_for(await self._endpoint(model))
        return await client.predict(turns, sampling=sampling, model=model)

    async def health(self) -> bool:
        return await self.primary.health()

    async def served_models(self) -> list[str]:
        return await self.primary.served_models()

    async def aclose(self) -> None:
        await self.primary.aclose()
        for client in self._clients.values():
            await client.aclose()
