"""What every benchmark prints beside its figures: the machine they were measured on.

    from machine import about, facts    # benchmarks/ is on sys.path when a benchmark runs

``about()`` is one line for a table's caption; ``facts()`` the same as JSON fields, with torch's
version and thread count when the benchmark uses torch (a service benchmark need not import it).
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from typing import Any


def facts(*, with_torch: bool = False) -> dict[str, Any]:
    if with_torch:
        importlib.import_module("torch")  # for its version and threads below
    found: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    loaded = sys.modules.get("torch")
    if loaded is not None:
        found["torch"] = loaded.__version__
        found["torch_threads"] = loaded.get_num_threads()
        found["cuda"] = loaded.cuda.get_device_name(0) if loaded.cuda.is_available() else None
    return found


def about() -> str:
    found = facts()
    line = f"{found['cpu']}, {found['cpus']} cores, Python {found['python']}, {platform.system()}"
    if "torch" in found:
        line += f", torch {found['torch']} ({found['torch_threads']} threads)"
        if found["cuda"]:
            line += f", {found['cuda']}"
    return line
