"""What the running service holds: store, keys, device pool, policy, runner."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.jobs import JobStore
from agent.policy import Policy
from agent.registry import ModelRegistry
from agent.store import TrajectoryStore
from devices.pool import DevicePool
from serve.auth import KeyStore
from serve.runner import TaskRunner
from serve.scheduler import Scheduler
from serve.settings import ServeSettings
from serve.swap import SwapController


@dataclass
class ServiceState:
    settings: ServeSettings
    store: TrajectoryStore
    keys: KeyStore
    pool: DevicePool
    policy: Policy
    runner: TaskRunner
    registry: ModelRegistry
    jobs: JobStore
    scheduler: Scheduler
    swap: (
        SwapController | None
    )  # None with a policy handed in (tests, the demo's oracle): promotions only move aliases
    # The last readiness probe of each dependency: (monotonic time, passed), reused for a few seconds.
    probes: dict[str, tuple[float, bool]] = field(default_factory=dict)
