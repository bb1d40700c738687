"""Shared fixtures: the tiny Qwen2.5-VL checkpoint and the UI-S1 interchange files."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from devices.ports import free_port

REPO = Path(__file__).resolve().parents[1]
VLLM_VENV = Path(os.environ.get("UIS1_VLLM_VENV", REPO / ".venv-vllm"))


# Tests of the operator's own hardware, skipped unless asked for (deploy/README.md, "Validating
# your own hardware"): a physical phone (-m phone) and a GPU vLLM server (-m gpu).
HARDWARE = {"phone": "UIS1_TEST_PHONE", "gpu": "UIS1_TEST_GPU"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, variable in HARDWARE.items():
            if marker in item.keywords and os.environ.get(variable) != "1":
                item.add_marker(
                    pytest.mark.skip(reason=f"needs {marker} hardware: set {variable}=1 (deploy/README.md)")
                )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen2.5-VL checkpoint, built once per test session."""
    pytest.importorskip("transformers")
    from agent.devkit.tiny_model import ensure_tiny_model

    return ensure_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def interchange_dir() -> Path:
    """The real UI-S1 interchange files (AndroidControl-derived, no images).

    They live in the project's shared data folder beside the checkout (``UIS1_INTERCHANGE_DATA``
    overrides). Missing data skips the tests on a developer's machine and fails them in CI.
    """
    path = Path(os.environ.get("UIS1_INTERCHANGE_DATA", REPO.parent / "shared" / "data" / "ui-s1"))
    if not (path / "android_control_train_example.jsonl").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"interchange data not found at {path}")
        pytest.skip(f"interchange data not found at {path} (set UIS1_INTERCHANGE_DATA)")
    return path


@pytest.fixture(scope="session")
def adb_server():  # type: ignore[no-untyped-def]
    """The real adb server (the adbutils wheel's binary) on a private port, for the whole session."""
    from devices.adb_server import AdbServer

    server = AdbServer(port=free_port()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fleet(adb_server):  # type: ignore[no-untyped-def]
    from devices.sim.fleet import SimFleet

    with SimFleet(adb_server) as fleet:
        yield fleet


@pytest.fixture
def sim(fleet):  # type: ignore[no-untyped-def]
    """A simulated phone attached to the real adb server, freshly reset for each test."""
    if not fleet.devices:
        fleet.add()
    device = fleet.devices[0]
    device.phone.faults.clear()
    device.phone.reset()
    device.phone.command_log.clear()
    states = {d.serial: d.state for d in fleet.client().list()}
    if states.get(device.serial) != "device":
        fleet.attach(device)
    return device


# The one place the tests' PostgreSQL URL comes from. The password is ignored by a server with trust
# authentication and is the one `.ci/run` gives the postgres user on a server that asks for one.
POSTGRES_ADMIN_URL = os.environ.get(
    "UIS1_TEST_POSTGRES_URL", "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def postgres_url():  # type: ignore[no-untyped-def]
    """A fresh PostgreSQL database for the session (dropped afterwards)."""
    import uuid

    import sqlalchemy as sa

    try:
        admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            name = f"uis1_test_{uuid.uuid4().hex[:10]}"
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL not reachable at {POSTGRES_ADMIN_URL}: {exc}")
        pytest.skip(f"PostgreSQL not reachable ({exc})")
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """An empty PostgreSQL database of its own for one test (dropped afterwards)."""
    import uuid

    import sqlalchemy as sa

    admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"uis1_test_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):  # type: ignore[no-untyped-def]
    """A migrated trajectory store on each database, empty for each test."""
    from agent.store import TrajectoryStore

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'trajectories.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    store = TrajectoryStore(url, tmp_path / "screenshots")
    store.migrate()
    if request.param == "postgresql":
        import sqlalchemy as sa

        with store.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE episodes, episode_deletions CASCADE"))
    yield store
    store.engine.dispose()


@contextmanager
def vllm_server(
    model_dir: Path,
    *,
    startup_s: float = 280,
    env: dict[str, str] | None = None,
    served_name: str | None = None,
) -> Iterator[dict[str, Any]]:
    """A real vLLM server (the CPU build, ``scripts/vllm-cpu serve``) on a free loopback port.

    Yields ``{"base_url", "model", "proc"}``; the server's log is ``.cache/vllm-test.log``. Without
    the vLLM environment the test is skipped on a developer's machine and fails in CI.
    """
    import httpx

    if not (VLLM_VENV / "bin" / "python").exists():
        if os.environ.get("CI"):
            pytest.fail(f"no vLLM environment at {VLLM_VENV}: run scripts/vllm-cpu setup")
        pytest.skip(f"no vLLM environment at {VLLM_VENV} (scripts/vllm-cpu setup)")
    port = free_port()
    log = (REPO / ".cache").resolve()
    log.mkdir(exist_ok=True)
    out = (log / "vllm-test.log").open("ab")
    extra = {**(env or {}), **({"UIS1_SERVED_MODEL_NAME": served_name} if served_name else {})}
    proc = subprocess.Popen(
        [str(REPO / "scripts" / "vllm-cpu"), "serve", str(model_dir), "--port", str(port)],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **extra},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}; see {log / 'vllm-test.log'}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("vLLM did not become healthy")
            time.sleep(1)
        yield {"base_url": base, "model": served_name or model_dir.name, "proc": proc}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        out.close()


# -- a trained starting point: the tiny model after SFT on simulated-phone expert data, produced
# -- once per session through the real command line (``uis1 train sft``) --------------------------
@pytest.fixture(scope="session")
def sft_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.training import SIM_DATA, train_sft

    return train_sft(tiny_model_dir, tmp_path_factory.mktemp("sft"), SIM_DATA, 60).parents[1]


@pytest.fixture(scope="session")
def sft_checkpoint(sft_run: Path) -> Path:
    return sft_run / "checkpoints" / "step-000060"
