"""The agent's settings: one pydantic-settings tree, read from ``UIS1_*`` variables.

``UIS1_STORE__URL=postgresql+psycopg://user@db/uis1``, ``UIS1_POLICY__BASE_URL=http://vllm:8000``,
``UIS1_EPISODE__MAX_STEPS=40``: nested fields are joined with ``__``. Only this module reads the
environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.episode import EpisodeSettings
from agent.geometry import ResizeSettings
from agent.vllm_policy import VllmSettings


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "uis1"


class StoreSettings(BaseModel):
    url: str = Field(default_factory=lambda: f"sqlite:///{_data_dir() / 'trajectories.db'}")
    screenshot_dir: Path = Field(default_factory=lambda: _data_dir() / "screenshots")
    screenshot_retention_days: float | None = None  # None keeps screenshots forever


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="UIS1_", env_nested_delimiter="__", extra="ignore")

    store: StoreSettings = StoreSettings()
    policy: VllmSettings = VllmSettings()
    episode: EpisodeSettings = EpisodeSettings()
    resize: ResizeSettings = ResizeSettings()
    adb_server: str = "127.0.0.1:5037"
