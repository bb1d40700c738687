"""Hot swaps into a running vLLM server: adapters by name, full weights blue-green or in place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import socket
import subprocess
import time
import uuid
from typing import Any

from agent.prompt import PromptSettings
from agent.registry import Kind, ModelRegistry, ModelVersion
from agent.store import TrajectoryStore
from agent.trajectory import EpisodeStatus
from agent.vllm_admin import VllmAdmin, VllmAdminError
from agent.vllm_policy import VllmPolicy, VllmSettings
from serve.models.swap.base import (
    HOLD_LOCK,
    LOADED_ALIAS_PREFIX,
    CanaryFailed,
    SwapController,
    SwapError,
    SwapSettings,
)

log = logging.getLogger(__name__)


class VllmSwapController(SwapController):
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
    ) -> None:
        super().__init__(store, registry, prompt, settings, owner=owner)
        self.policy = policy
        self.engines: dict[str, subprocess.Popen[bytes]] = {}  # blue/green engines this controller started

    def _strategy(self) -> str:
        if self.settings.strategy == "auto":
            return "blue_green" if self.settings.launch_command else "in_place"
        return self.settings.strategy

    async def _path(self, version: ModelVersion) -> str:
        """How ``version`` gets served: an adapter loaded beside the rest, a second engine, an alias
        over the weights the engine holds, or the engine's weights reloaded in place."""
        if version.kind == Kind.ADAPTER:
            return "adapter"
        if version.endpoint:
            return "blue_green"
        loaded = await self._is_loaded(version)
        if self._strategy() == "blue_green" and not loaded:
            return "blue_green"
        return "alias" if loaded else "in_place"

    async def _serve(
        self, version: ModelVersion, current: ModelVersion | None, *, rollback: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """Make ``version`` answer under its served name and canary it; returns (path, canary)."""
        path = await self._path(version)
        if path == "adapter":
            return path, await self._serve_adapter(version, rollback=rollback)
        if path == "blue_green":
            return path, await self._serve_blue_green(version)
        if path == "alias":
            return path, await self._canary(version, self._url(version))
        return path, await self._serve_in_place(version, current)

    async def _stageable(self, version: ModelVersion) -> bool:
        return await self._path(version) != "in_place"

    async def _still_loaded(self, version: ModelVersion) -> bool:
        path = await self._path(version)
        if path in ("alias", "in_place"):  # in place: the engine holds other weights by that name
            return path == "alias"
        admin = self._admin(self._url(version))
        try:
            if path == "blue_green":
                return await self._off(admin.healthy)
            return version.served_name in await self._off(admin.served_models)
        except VllmAdminError:
            return False
        finally:
            admin.close()

    def _url(self, version: ModelVersion) -> str:
        return version.endpoint or self.policy.base_url

    def _admin(self, url: str) -> VllmAdmin:
        return VllmAdmin(url, api_key=self.policy.api_key)

    async def _is_loaded(self, version: ModelVersion) -> bool:
        """A full version is in the primary engine already (it is what the engine holds)."""
        held = (await self._off(self.registry.aliases)).get(LOADED_ALIAS_PREFIX + version.served_name)
        if held is not None:
            return held == version.name
        return version.kind == Kind.BASE  # an engine started on a base model holds it from the start

    # -- adapters ----------------------------------------------------------------------------------
    async def _serve_adapter(self, version: ModelVersion, *, rollback: bool) -> dict[str, Any]:
        url = self._url(version)
        admin = self._admin(url)
        try:
            with self._phase("load"):
                served = await self._off(admin.served_models)
                loaded_here = version.served_name not in served
                if loaded_here:
                    await self._off(admin.load_adapter, version.served_name, version.adapter or "")
        except VllmAdminError as exc:
            admin.close()
            await self._reject(version, f"loading the adapter failed: {exc}", rollback)
            raise SwapError(str(exc)) from exc
        try:
            return await self._canary(version, url)
        except CanaryFailed as exc:
            if loaded_here:
                await self._off(_best_effort, admin.unload_adapter, version.served_name)
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
        await self._off(self.jobs.acquire, HOLD_LOCK, token, ttl_s=self.settings.lock_ttl_s, owner=self.owner)
        admin = self._admin(self.policy.base_url)
        previous_weights = None
        try:
            with self._phase("drain"):
                await asyncio.sleep(self.settings.hold_grace_s)  # every replica has seen the hold
                await self._drain()
            previous_weights = await self._off(self._weights_in_engine, version.served_name, current)
            with self._phase("load"):
                await self._off(admin.reload_weights, version.base)
            await self._off(
                self.registry.set_alias, LOADED_ALIAS_PREFIX + version.served_name, version.name, actor="swap"
            )
            canary = await self._canary(version, self.policy.base_url)
        except (CanaryFailed, VllmAdminError) as exc:
            if previous_weights is not None:  # put back what the engine held
                try:
                    await self._off(admin.reload_weights, previous_weights[1])
                    await self._off(
                        self.registry.set_alias,
                        LOADED_ALIAS_PREFIX + version.served_name,
                        previous_weights[0],
                        actor="swap",
                    )
                except VllmAdminError as again:
                    log.error("could not reload the previous weights %s: %s", previous_weights[1], again)
            await self._off(self.jobs.release, HOLD_LOCK, token)
            if isinstance(exc, CanaryFailed):
                await self._reject(version, str(exc), False)
                raise
            raise SwapError(f"in-place reload of {version.name} failed: {exc}") from exc
        except BaseException:
            await self._off(self.jobs.release, HOLD_LOCK, token)
            raise
        finally:
            admin.close()
        # New episodes stay held until the alias has moved too (the caller releases the hold):
        # one that started in between would ask for the old version, which the engine no longer has.
        self._hold_token = token
        return canary

    def _weights_in_engine(self, served_name: str, current: ModelVersion | None) -> tuple[str, str] | None:
        """(version, checkpoint path) the engine holds now, to restore if the canary fails."""
        held = self.registry.aliases().get(LOADED_ALIAS_PREFIX + served_name)
        version = self.registry.get(held) if held else current
        if version is None or version.kind == Kind.ADAPTER or not version.base:
            return None
        return version.name, version.base

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while True:
            running = await self._off(self.store.count, EpisodeStatus.RUNNING)
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
            url = await self._off(self._launch, version)
        try:
            canary = await self._canary(version, url)
        except CanaryFailed as exc:
            self._stop_engine(url)
            await self._reject(version, str(exc), False)
            raise
        await self._off(self.registry.set_endpoint, version.name, url, actor="swap")
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
            await self._off(_best_effort, admin.unload_adapter, old.served_name)
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
                lambda turns, count: client.score(turns, count, model=version.served_name),
                "vllm",
            )
        finally:
            await client.aclose()


def _best_effort(call: Any, *args: Any) -> None:
    """An admin call made to tidy up (unload an adapter no one uses): a failure is logged, not raised."""
    try:
        call(*args)
    except VllmAdminError as exc:
        log.warning("%s", exc)
