"""vLLM's control plane: loading adapters and reloading weights in a running server.

Only the service's hot-swap controller and the trainer's own rollout server call these; clients
never reach them (``--api-key`` does not cover the dev-mode routes, so the vLLM port must stay
private). What each call needs on the server:

- adapters: ``--enable-lora`` (``--max-lora-rank`` at least the adapter's rank) and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. Each version is loaded under its own name from its
  own path, never reloaded in place (stale prefix-cache blocks would be reused).
- in-place reload: ``VLLM_SERVER_DEV_MODE=1``. The sequence is pause (waiting for running requests)
  → ``collective_rpc reload_weights`` → reset the encoder, multimodal and prefix caches (a stale
  encoder cache crashes the engine; a stale prefix cache serves old-weight KV) → resume. The
  resume runs whatever happened, so a failed reload never leaves the server paused.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx

log = logging.getLogger(__name__)


class VllmAdminError(RuntimeError):
    pass


class VllmAdmin:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 300.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0)
        )

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, Any] | None = None
    ) -> httpx.Response:
        try:
            response = self.client.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise VllmAdminError(f"vLLM at {self.base_url} did not answer {path}: {exc}") from exc
        if response.status_code >= 400:
            raise VllmAdminError(f"vLLM {path} answered {response.status_code}: {response.text[:300]}")
        return response

    # -- state -------------------------------------------------------------------------------------
    def healthy(self) -> bool:
        try:
            return self.client.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(1.0)
        raise VllmAdminError(f"vLLM at {self.base_url} not healthy after {timeout_s:.0f}s")

    def served_models(self) -> list[str]:
        return [m["id"] for m in self._call("GET", "/v1/models").json().get("data", [])]

    # -- adapters ----------------------------------------------------------------------------------
    def load_adapter(self, name: str, path: str) -> None:
        self._call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        log.info("vLLM %s: adapter %s loaded from %s", self.base_url, name, path)

    def unload_adapter(self, name: str) -> None:
        self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        log.info("vLLM %s: adapter %s unloaded", self.base_url, name)

    # -- full weights ------------------------------------------------------------------------------
    def reload_weights(self, path: str) -> float:
        """Reload the served model's weights from ``path`` in place; returns the seconds paused."""
        start = time.perf_counter()
        self._call("POST", "/pause", params={"mode": "wait"})
        try:
            self._call(
                "POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}}
            )
            for cache in ("/reset_encoder_cache", "/reset_mm_cache", "/reset_prefix_cache"):
                self._call("POST", cache)
        finally:
            self._call("POST", "/resume")
        paused = time.perf_counter() - start
        log.info("vLLM %s: weights reloaded from %s (paused %.2fs)", self.base_url, path, paused)
        return paused

    def close(self) -> None:
        self.client.close()
