"""The training tests' helpers live in ``tests.training``; the SFT fixtures in ``tests/conftest.py``."""

from tests.training import RESIZE, SIM_DATA, clean_env, metrics, uis1, write_config

__all__ = ["RESIZE", "SIM_DATA", "clean_env", "metrics", "uis1", "write_config"]
