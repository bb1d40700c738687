"""The service's settings: the agent's tree plus what the API process needs (``UIS1_*``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field

from agent.prompt import PromptSettings
from agent.settings import AgentSettings
from devices.adb_server import default_server
from serve.models.swap import SwapSettings
from serve.ops.scheduler import SchedulerSettings
from serve.tasks.takeover import Approval

ReadinessCheck = Literal["database", "policy", "device"]


class ServeSettings(AgentSettings):
    host: str = Field("127.0.0.1", description="Bind address of `uis1 serve`")
    port: int = Field(8080, gt=0, lt=65536, description="Port of `uis1 serve`")
    policy_backend: Literal["vllm", "local"] = Field(
        "vllm", description="vLLM over HTTP, or a local checkpoint"
    )
    local_model_dir: Path | None = Field(None, description="Checkpoint directory for policy_backend=local")
    adb_servers: list[str] = Field(
        default_factory=lambda: [default_server()],
        description="adb servers of the device pool (JSON list; default: adb's own, ANDROID_ADB_SERVER_PORT)",
    )
    max_queue: int = Field(100, gt=0, description="Queued tasks before new ones get 429")
    approval: Approval = Field(
        default_factory=Approval,
        description="Actions that wait for a person's approval, unless a task sets its own",
    )
    shutdown_grace_s: float = Field(
        30.0, ge=0, description="On SIGTERM, how long running episodes may finish"
    )
    cors_origins: list[str] = Field(
        default_factory=list, description="Allowed CORS origins (JSON list; empty: off)"
    )
    max_body_bytes: int = Field(
        32 * 1024 * 1024,
        gt=0,
        description="Largest request body, in bytes (sized for /v1/predict's screenshots); a larger one "
        "gets 413 before it is parsed",
    )
    max_upload_bytes: int = Field(
        20 * 1024 * 1024, gt=0, description="Largest screenshot of a /v1/predict request, in bytes"
    )
    max_predict_pixels: int = Field(
        100_000_000,
        gt=0,
        description="Pixels the screenshots of one /v1/predict request may hold in all (20 of 1440x3200 "
        "fit); more gets 413 before any is decoded",
    )
    # Several replicas on one PostgreSQL database: each needs its own id (a restarted replica
    # keeps it, so its old device leases are dropped at once); every replica must name the adb
    # servers identically.
    replica_id: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=128,
        description="Stable id of this replica (default: the host name)",
    )
    device_lease_ttl_s: float = Field(30.0, gt=0, description="A dead replica's phones free up after this")
    readiness_checks: list[ReadinessCheck] = Field(
        default_factory=lambda: list(get_args(ReadinessCheck)),
        description="What /readyz requires (JSON list); behind a load balancer, database alone",
    )
    screenshot_capture: Literal["png", "raw"] = Field(
        "png",
        description="png: `screencap -p` (the phone compresses); raw: uncompressed frames, for fast links "
        "and slow phones (see benchmarks/screenshot_path.py)",
    )
    image_transport: Literal["auto", "resized", "original"] = Field(
        "auto",
        description="auto: original once the policy server is checked at start to resize as "
        "UIS1_RESIZE__* does, else resized; resized: the service resizes screenshots; original: "
        "the captured PNG goes as is (the server's min/max pixels must equal UIS1_RESIZE__*)",
    )
    api_keys_file: Path | None = Field(
        None,
        description="Keys managed by a file (a mounted secret): lines `NAME SCOPES TOKEN`, applied at start",
    )
    # Model swaps into the running vLLM (canary, rollback, blue/green) and the evaluation gate.
    swap: SwapSettings = SwapSettings()
    # Nightly retraining (`uis1 retrain` in a child process) and its schedule.
    scheduler: SchedulerSettings = SchedulerSettings()

    def prompt_settings(self) -> PromptSettings:
        """How prompts are built: the resize limits and how screenshots travel to the policy."""
        transport = "resized" if self.image_transport == "auto" else self.image_transport
        return PromptSettings(resize=self.resize, image_transport=transport)
