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

from serve.models.swap.base import (
    HOLD_LOCK,
    LOADED_ALIAS_PREFIX,
    SWAP_LOCK,
    CanaryFailed,
    SwapController,
    SwapError,
    SwapResult,
    SwapSettings,
)
from serve.models.swap.canary import turns as canary_turns
from serve.models.swap.local import LocalSwapController
from serve.models.swap.vllm import VllmSwapController

__all__ = [
    "HOLD_LOCK",
    "LOADED_ALIAS_PREFIX",
    "SWAP_LOCK",
    "CanaryFailed",
    "LocalSwapController",
    "SwapController",
    "SwapError",
    "SwapResult",
    "SwapSettings",
    "VllmSwapController",
    "canary_turns",
]
