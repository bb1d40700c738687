"""The service in its own process, as a benchmark runs it (``uis1 serve`` with settings from the
environment, a key file, SQLite in a work directory, simulated phones behind an adb server).

    from service import ServiceProcess    # benchmarks/ is on sys.path when a benchmark runs

``--service-checkout DIR`` in a benchmark runs another checkout's service (``PYTHONPATH``), for
before/after figures on one machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


class ServiceProcess:
    """``uis1 serve`` on ``port``, its key made and its log kept in ``workdir``; ``settings`` are
    UIS1_* variables over the defaults (the caller's own UIS1_ and ANDROID_ variables are dropped)."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int,
        adb_port: int,
        policy_url: str,
        settings: dict[str, str] | None = None,
        checkout: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.base = f"http://127.0.0.1:{port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("UIS1_", "ANDROID_"))}
        if checkout is not None:
            self.env["PYTHONPATH"] = str(checkout.resolve())
        self.uis1 = str(Path(sys.executable).with_name("uis1"))
        key_line = subprocess.run(
            [self.uis1, "keys", "generate", "bench"], capture_output=True, text=True, check=True, env=self.env
        )
        (workdir / "keys").write_text(key_line.stdout)
        self.token = key_line.stdout.split()[2]
        self.env.update(
            {
                "UIS1_STORE__URL": f"sqlite:///{workdir / 'store.db'}",
                "UIS1_STORE__SCREENSHOT_DIR": str(workdir / "screenshots"),
                "UIS1_PORT": str(port),
                "UIS1_API_KEYS_FILE": str(workdir / "keys"),
                "UIS1_ADB_SERVERS": f'["127.0.0.1:{adb_port}"]',
                "UIS1_POLICY__BASE_URL": policy_url,
                "UIS1_POLICY__MODEL": "bench",
                "UIS1_EPISODE__SETTLE_S": "0",
                **(settings or {}),
            }
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, ready: str = "/healthz", timeout_s: float = 90) -> ServiceProcess:
        """Start it and wait until ``ready`` answers 200."""
        log = (self.workdir / "service.log").open("wb")
        self.process = subprocess.Popen(
            [self.uis1, "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}{ready}", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the service did not start; see {self.workdir / 'service.log'}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
