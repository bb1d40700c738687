"""What the API image installs is enough: a fresh environment from the core lock and the project
wheel (the Dockerfile's api stages, without a container runtime) serves, passes its healthcheck,
sees phones on the adb server, and has no torch."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devices.ports import free_port
from tests.deploy.test_deploy import _stages

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(900)


def test_the_api_install_serves_without_torch(tmp_path: Path, adb_server, fleet) -> None:  # type: ignore[no-untyped-def]
    while len(fleet.devices) < 1:
        fleet.add()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input"]
    subprocess.run([*pip, "-r", str(REPO / "requirements" / "core.lock")], check=True, timeout=600)
    # The wheel stage: build from exactly what the Dockerfile copies into it.
    context = tmp_path / "context"
    context.mkdir()
    copies = [line.split()[1:-1] for line in _stages()["wheel"] if line.startswith("COPY ")]
    for source in (s for sources in copies for s in sources):
        copy = shutil.copytree if (REPO / source).is_dir() else shutil.copy2
        copy(REPO / source, context / source)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(wheels),
            str(context),
        ],
        check=True,
        timeout=300,
    )
    subprocess.run([*pip, "--no-deps", *map(str, wheels.glob("*.whl"))], check=True, timeout=300)
    uis1 = str(venv / "bin" / "uis1")
    missing = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True, check=False
    )
    assert missing.returncode != 0

    line = subprocess.run(
        [uis1, "keys", "generate", "probe"], capture_output=True, text=True, check=True
    ).stdout
    keys = tmp_path / "keys"
    keys.write_text(line)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UIS1_")}
    env.update(
        {
            "UIS1_STORE__URL": f"sqlite:///{tmp_path / 'store.db'}",
            "UIS1_STORE__SCREENSHOT_DIR": str(tmp_path / "shots"),
            "UIS1_PORT": str(port),
            "UIS1_ADB_SERVERS": f'["127.0.0.1:{adb_server.port}"]',
            "UIS1_API_KEYS_FILE": str(keys),
            "UIS1_READINESS_CHECKS": '["database", "device"]',
            "UIS1_POLICY__BASE_URL": "http://127.0.0.1:9",
        }
    )
    assert subprocess.run([uis1, "settings"], env=env, capture_output=True, check=False).returncode == 0
    assert subprocess.run([uis1, "healthcheck"], env=env, capture_output=True, check=False).returncode == 1
    server = subprocess.Popen(
        [uis1, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while (
            subprocess.run([uis1, "healthcheck"], env=env, capture_output=True, check=False).returncode != 0
        ):
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            assert time.monotonic() < deadline, "the service did not come up"
            time.sleep(0.5)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.get("/readyz").status_code == 200
            auth = {"Authorization": f"Bearer {line.split()[2]}"}
            page = client.get("/viewer", headers=auth)  # its pages are package data of the wheel
            assert page.status_code == 200, page.text[-500:]
            assert "</html>" in page.text.lower()
            devices = client.get("/v1/devices", headers=auth)
            assert devices.status_code == 200, devices.text
            assert {d["serial"] for d in devices.json()} >= {d.serial for d in fleet.devices}
            assert client.get("/v1/devices").status_code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=60)[0]
    assert server.returncode in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal once done
    assert "Application shutdown complete" in output
    assert "torch" not in output
