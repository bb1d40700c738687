"""The agent's settings: one pydantic-settings tree, read from ``UIS1_*`` variables.

``UIS1_STORE__URL=postgresql+psycopg://user@db/uis1``, ``UIS1_POLICY__BASE_URL=http://vllm:8000``,
``UIS1_EPISODE__MAX_STEPS=40``: nested fields are joined with ``__``. Only this module reads the
environment.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.episode import EpisodeSettings
from agent.geometry import ResizeSettings
from agent.vllm_policy import VllmSettings


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "uis1"


class StoreSettings(BaseModel):
    url: str = Field(
        default_factory=lambda: f"sqlite:///{_data_dir() / 'trajectories.db'}",
        description="SQLAlchemy URL of the store (default: SQLite under $XDG_DATA_HOME/uis1); "
        "postgresql+psycopg://... for several replicas",
    )
    screenshot_dir: Path = Field(
        default_factory=lambda: _data_dir() / "screenshots",
        description="Folder of content-addressed screenshots (default: $XDG_DATA_HOME/uis1/screenshots)",
    )
    screenshot_retention_days: float | None = Field(
        None,
        ge=0,
        description="Delete screenshots of episodes older than this (days); unset keeps them forever",
    )
    episode_retention_days: float | None = Field(
        None,
        gt=0,
        description="Delete finished episodes older than this (days), with their steps, labels and "
        "screenshots; unset keeps them forever",
    )


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="UIS1_", env_nested_delimiter="__", extra="ignore")

    store: StoreSettings = StoreSettings()
    policy: VllmSettings = VllmSettings()
    episode: EpisodeSettings = EpisodeSettings()
    resize: ResizeSettings = ResizeSettings()
    adb_server: str | None = Field(
        None,
        description="The adb server `uis1 run` uses (default: adb's own, from ADB_SERVER_SOCKET or "
        "ANDROID_ADB_SERVER_PORT, else 127.0.0.1:5037)",
    )


# ``UIS1_*`` variables that are not settings: the vLLM CPU helper script's, the demo's model cache
# and the test suite's.
OTHER_VARIABLES = frozenset(
    {
        "UIS1_VLLM_VENV",
        "UIS1_VLLM_VERSION",
        "UIS1_VLLM_SCRATCH",
        "UIS1_VLLM_MAX_MODEL_LEN",
        "UIS1_SERVED_MODEL_NAME",
        "UIS1_TEST_POSTGRES_URL",
        "UIS1_INTERCHANGE_DATA",
        "UIS1_CACHE_DIR",
        # the operator's own hardware tests (deploy/README.md, "Validating your own hardware")
        "UIS1_TEST_PHONE",
        "UIS1_TEST_PHONE_SERIAL",
        "UIS1_TEST_ADB_HOST",
        "UIS1_TEST_ADB_PORT",
        "UIS1_TEST_GPU",
        "UIS1_TEST_VLLM_URL",
        "UIS1_TEST_VLLM_MODEL",
        "UIS1_TEST_VLLM_API_KEY",
    }
)


@dataclass(frozen=True)
class SettingDoc:
    """One setting as an operator sees it: its variable, type, default and meaning."""

    env: str
    type: str
    default: str
    description: str


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (UnionType, Union):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" (optional)" if type(None) in args else "")
    if origin in (list, tuple):
        return f"JSON list of {_type_name(args[0])}"
    return getattr(annotation, "__name__", str(annotation)).replace("Path", "path")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        if "default:" in (field.description or ""):  # depends on the machine: the meaning says how
            return "(computed)"
        value = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return str(value)


def _model_type(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def describe(model: type[BaseModel], prefix: str = "UIS1_") -> list[SettingDoc]:
    """Every leaf setting of ``model`` with the variable that sets it, in declaration order."""
    docs: list[SettingDoc] = []
    for name, field in model.model_fields.items():
        env = f"{prefix}{name.upper()}"
        nested = _model_type(field.annotation)
        if nested is not None:
            docs.extend(describe(nested, env + "__"))
        else:
            docs.append(
                SettingDoc(env, _type_name(field.annotation), _default(field), field.description or "")
            )
    return docs


def variable_names(model: type[BaseModel], prefix: str = "UIS1_") -> set[str]:
    """The variables ``model`` reads: its leaves and its groups (a group takes a JSON object)."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        env = f"{prefix}{name.upper()}"
        names.add(env)
        nested = _model_type(field.annotation)
        if nested is not None:
            names |= variable_names(nested, env + "__")
    return names


def unknown_variables(
    model: type[BaseModel], environ: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """``UIS1_*`` variables no setting reads (typos, removed settings), each with a likely meant name.

    pydantic-settings ignores them silently, so a misspelt variable would leave its default in force.
    """
    environ = os.environ if environ is None else environ
    known = variable_names(model)
    unknown: dict[str, str | None] = {}
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("UIS1_") or upper in known or upper in OTHER_VARIABLES:
            continue
        close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.75)
        unknown[name] = close[0] if close else None
    return unknown


def markdown_table(model: type[BaseModel]) -> str:
    """The settings reference as a Markdown table (`uis1 settings --markdown`)."""
    lines = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for doc in describe(model):
        default = doc.default.replace("|", "\\|")
        lines.append(f"| `{doc.env}` | {doc.type} | `{default}` | {doc.description} |")
    return "\n".join(lines) + "\n"
