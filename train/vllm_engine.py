"""A rollout engine on a vLLM server: the same OpenAI-compatible API serving uses.

The trainer's current weights reach the server between training steps:

- ``sync: lora`` (the default): the adapter is saved and loaded under a new name with
  ``/v1/load_lora_adapter``, then the previous one is unloaded. Needs ``--enable-lora`` (rank at
  least the adapter's) and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` on the server.
- ``sync: reload``: the full weights are saved and reloaded in place with ``/collective_rpc
  reload_weights``, then the encoder and prefix caches are reset (stale otherwise; the encoder
  cache miss even kills the engine). Needs ``VLLM_SERVER_DEV_MODE=1``: that server must be one
  the trainer owns, never the one serving clients.

Responses come back as text; the learner tokenises them again (token ids are used when the server
returns them).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from agent.prompt import PromptSettings, Turn, to_openai_messages
from agent.vllm_admin import VllmAdmin, VllmAdminError
from train.config import EngineSettings
from train.model import PolicyModel, Sampling
from train.rollout import Generated, RolloutEngine


class VllmEngineError(RuntimeError):
    pass


class VllmEngine(RolloutEngine):
    """Rollouts sampled by a vLLM server; a group's prompts are sent at once, for the server to batch."""

    def __init__(
        self,
        settings: EngineSettings,
        policy: PolicyModel | None,
        run_dir: Path | None,
        *,
        prompt: PromptSettings | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.run_dir = run_dir
        self.prompt = prompt or (policy.prompt if policy is not None else PromptSettings())
        vllm = settings.vllm
        headers = {"Authorization": f"Bearer {vllm.api_key}"} if vllm.api_key else {}
        self.client = httpx.Client(
            base_url=vllm.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(vllm.timeout_s, connect=vllm.connect_timeout_s),
        )
        self.admin = VllmAdmin(vllm.base_url, api_key=vllm.api_key, timeout_s=max(vllm.timeout_s, 300.0))
        self.served = vllm.model
        self._loaded: str | None = None
        self.suppress = policy.suppress if policy is not None else list(vllm.suppress_token_ids)

    def _post(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            response = self.client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise VllmEngineError(f"vLLM at {self.client.base_url} did not answer {path}: {exc}") from exc
        if response.status_code >= 400:
            raise VllmEngineError(f"vLLM {path} answered {response.status_code}: {response.text[:300]}")
        return response

    def _admin(self, call: Callable[[VllmAdmin], object]) -> None:
        try:
            call(self.admin)
        except VllmAdminError as exc:
            raise VllmEngineError(str(exc)) from exc

    # -- weights -----------------------------------------------------------------------------------
    def sync(self, step: int) -> None:
        """Serve the policy's current weights from the next request on."""
        if self.policy is None or self.run_dir is None:
            raise VllmEngineError("this engine has no policy to sync (evaluation only)")
        target = self.run_dir / "vllm-weights" / f"step-{step:06d}"
        if self.settings.sync == "lora":
            if not self.policy.has_adapter:
                raise VllmEngineError(
                    "sync: lora needs learner.lora (a LoRA run); use sync: reload for a full fine-tune"
                )
            self.policy.save(target)
            name = f"{Path(self.settings.vllm.model).name}-rl-step-{step}"
            self._admin(lambda admin: admin.load_adapter(name, str(target)))
            previous, self._loaded, self.served = self._loaded, name, name
            if previous is not None:
                self._admin(lambda admin: admin.unload_adapter(previous))
        else:
            self.policy.save(target, merged=True)
            self._admin(lambda admin: admin.reload_weights(str(target)))
        for old in sorted(target.parent.glob("step-*"))[:-2]:  # the server may still read the last one
            shutil.rmtree(old, ignore_errors=True)

    # -- sampling ----------------------------------------------------------------------------------
    def generate(self, turns: Sequence[Turn], n: int, sampling: Sampling) -> list[Generated]:
        body: dict[str, Any] = {
            "model": self.served,
            "messages": to_openai_messages(turns, self.prompt),
            "n": n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
            "return_token_ids": True,
        }
        if self.suppress:
            body["logit_bias"] = {str(t): -100 for t in self.suppress}
        data = self._post("/v1/chat/completions", body).json()
        out = []
        for choice in data["choices"]:
            text = choice["message"].get("content") or ""
            ids = choice.get("token_ids")
            token_ids = None
            if ids and self.policy is not None:
                import torch

                if choice.get("finish_reason") == "stop" and ids[-1] != self.policy.end_of_turn:
                    ids = [*ids, self.policy.end_of_turn]  # the stop token, as the learner scores it
                token_ids = torch.tensor(ids, dtype=torch.long)
            out.append(Generated(text, token_ids))
        return out

    def generate_many(
        self, requests: Sequence[tuple[Sequence[Turn], int]], sampling: Sampling
    ) -> list[list[Generated]]:
        if len(requests) == 1:
            turns, n = requests[0]
            return [self.generate(turns, n, sampling)]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            return list(pool.map(lambda request: self.generate(request[0], request[1], sampling), requests))

    def close(self) -> None:
        self.client.close()
        self.admin.close()
