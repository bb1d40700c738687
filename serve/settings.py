"""The service's settings: the agent's tree plus what the API process needs (``UIS1_*``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field

from agent.settings import AgentSettings
from serve.scheduler import SchedulerSettings
from serve.swap import SwapSettings


class ServeSettings(AgentSettings):
    host: str = "127.0.0.1"
    port: int = Field(8080, gt=0, lt=65536)
    policy_backend: Literal["vllm", "local"] = "vllm"
    local_model_dir: Path | None = None  # for policy_backend=local
    adb_servers: list[str] = Field(default_factory=lambda: ["127.0.0.1:5037"])
    max_queue: int = Field(100, gt=0)
    shutdown_grace_s: float = Field(30.0, ge=0)
    cors_origins: list[str] = Field(default_factory=list)  # empty: CORS off
    max_upload_bytes: int = Field(20 * 1024 * 1024, gt=0)
    # Several replicas on one PostgreSQL database: each needs its own id (a restarted replica
    # keeps it, so its old device leases are dropped at once); every replica must name the adb
    # servers identically.
    replica_id: str = Field(default_factory=socket.gethostname, min_length=1, max_length=128)
    device_lease_ttl_s: float = Field(30.0, gt=0)  # a dead replica's phones free up after this
    # Model swaps into the running vLLM (canary, rollback, blue/green) and the evaluation gate.
    swap: SwapSettings = SwapSettings()
    # Nightly retraining (`uis1 retrain` in a child process) and its schedule.
    scheduler: SchedulerSettings = SchedulerSettings()
