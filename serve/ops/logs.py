"""Structured logs: one JSON object a line, with the task and step ids where there are any.

``setup_logging()`` is called by ``uis1 serve``; code logs as usual and passes ids through
``extra={"task_id": ..., "step": ...}``. Query strings are never logged (they could hold a key).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter


class JsonFormatter(_LibraryJsonFormatter):
    """python-json-logger's formatter with this service's fields: ``ts`` (UTC), ``level`` (lower
    case), ``logger``, ``msg``, every ``extra`` value, and ``exc`` (the traceback, in the line)."""

    def __init__(self) -> None:
        super().__init__(
            "{levelname}{name}{message}",
            style="{",
            rename_fields={"levelname": "level", "name": "logger", "message": "msg", "exc_info": "exc"},
            timestamp="ts",
            reserved_attrs=[*RESERVED_ATTRS, "color_message"],  # uvicorn's coloured copy of msg
            json_ensure_ascii=False,
        )

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        log_data["level"] = str(log_data["level"]).lower()
        return log_data


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # the app logs requests itself, without query strings
    logging.getLogger("alembic").setLevel(logging.WARNING)
