"""What the running service holds: store, keys, device pool, policy, runner."""

from __future__ import annotations

from dataclasses import dataclass

from agent.policy import Policy
from agent.registry import ModelRegistry
from agent.store import TrajectoryStore
from devices.pool import DevicePool
from serve.auth import KeyStore
from serve.runner import TaskRunner
from serve.settings import ServeSettings


@dataclass
class ServiceState:
    settings: ServeSettings
    store: TrajectoryStore
    keys: KeyStore
    pool: DevicePool
    policy: Policy
    runner: TaskRunner
    registry: ModelRegistry
