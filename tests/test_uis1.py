"""The ``uis1`` entry point, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version

import pytest

UIS1 = shutil.which("uis1") or str(__import__("pathlib").Path(sys.executable).parent / "uis1")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UIS1, *args], capture_output=True, text=True, timeout=120, check=False)


def _assert_python_runs(code: str) -> None:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and require it to succeed."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_help_lists_the_package_commands() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert "version" in result.stdout
    assert "agent" in result.stdout


@pytest.mark.parametrize("argv", [("version",), ("--version",)])
def test_version_prints_the_distribution_version(argv: tuple[str, ...]) -> None:
    result = run(*argv)
    assert result.returncode == 0
    assert result.stdout.strip() == f"ui-s1 {version('ui-s1')}"


def test_the_entry_point_does_not_import_torch() -> None:
    code = (
        "import sys; from agent.uis1 import app; "
        "sys.argv = ['uis1', 'agent', '--help']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'"
    )
    _assert_python_runs(code)


def test_agent_parse_reports_errors_with_a_nonzero_exit() -> None:
    ok = subprocess.run(
        [UIS1, "agent", "parse"],
        input='<action>{"action": "wait", "time": 2}</action>',
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0
    assert '"action": "wait"' in ok.stdout
    bad = run("agent", "parse", "no action here")
    assert bad.returncode == 1
    assert "no_action_tag" in bad.stdout


@pytest.mark.parametrize("content", ["{broken", '{"goal": "g", "steps": [{"screenshot": "a"}]}'])
def test_agent_convert_rejects_a_corrupt_file_clearly(tmp_path, content: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.jsonl"
    path.write_text(content + "\n")
    result = run("agent", "convert", str(path))
    assert result.returncode == 2
    assert f"{path}:1" in result.stderr


def test_the_service_and_its_swap_and_schedule_never_import_the_trainer() -> None:
    """DESIGN: the API process stays free of torch; retraining runs as a separate process."""
    code = (
        "import sys, serve.api.app, serve.cli.service, serve.models.swap, serve.ops.scheduler, serve.models.engines\n"
        "heavy = [m for m in ('torch', 'transformers', 'deepspeed', 'train') if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    _assert_python_runs(code)


def _run_in(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith("UIS1_")}
    environment.update({"UIS1_STORE__URL": f"sqlite:///{tmp_path / 'store.db'}", **env})
    return subprocess.run(
        [UIS1, *args], capture_output=True, text=True, timeout=120, check=False, env=environment, cwd=tmp_path
    )


@pytest.mark.parametrize(
    ("argv", "env", "code", "says"),
    [
        (("models", "show", "nope"), {}, 1, "error: no model version 'nope'"),
        (
            ("serve",),
            {"UIS1_EPISODE__MAX_STEPS": "abc"},
            2,
            "error: invalid ServeSettings: episode.max_steps",
        ),
        (
            ("train", "sft", "--config", "bad.yaml"),
            {},
            2,
            "error: bad.yaml: not valid YAML: line 2, column 4",
        ),
        (
            ("retrain", "--config", "bad.yaml", "--check"),
            {},
            2,
            "error: bad.yaml: not valid YAML: line 2, column 4",
        ),
        (("retrain", "--config", "retrain.yaml"), {}, 1, "error: no version is promoted yet: set base_model"),
        (("serve", "--port", "99999"), {}, 2, "error: Invalid value for '--port'"),
        (
            ("serve",),
            {"UIS1_STORE__URL": "postgresql+psycopg://u@127.0.0.1:1/x"},
            1,
            "error: the store's database does not answer",
        ),
        (("train", "sft", "--config", "missing.yaml"), {}, 2, "error: Invalid value for '--config'"),
        (("train", "sft", "--config", "nomodel.yaml"), {}, 2, "error: nomodel.yaml: no checkpoint folder at"),
        (("nosuch",), {}, 2, "error: No such command 'nosuch'."),
        (("trajectories", "list"), {"UIS1_STORE__URL": "foo://x"}, 2, "error: the store's URL is not one"),
        (("trajectories", "show", "nope"), {}, 1, "error: no episode nope in sqlite:///"),
        (
            ("models", "register", "v1", "--base", "/m", "--kind", "bogus"),
            {},
            2,
            "error: Invalid value for '--kind': 'bogus' is not a kind (base, full, adapter)",
        ),
        (("trajectories", "list", "--limit", "0"), {}, 2, "error: Invalid value for '--limit'"),
        (
            ("trajectories", "list", "--status", "bogus"),
            {},
            2,
            "error: Invalid value for '--status': 'bogus' is not a status (pending, running,",
        ),
        (
            ("devices", "list"),
            {"ANDROID_ADB_SERVER_PORT": "abc"},
            2,
            "error: ANDROID_ADB_SERVER_PORT is a port",
        ),
        (
            ("devices", "list"),
            {"ANDROID_ADB_SERVER_PORT": "1"},
            2,
            "error: no adb server answers at 127.0.0.1:1",
        ),
        (("devices", "list", "-s", "nonsense"), {}, 2, "error: an adb server is host:port, got 'nonsense'"),
        (
            ("trajectories", "list"),
            {"UIS1_STORE__URL": "postgresql+psycopg://u@127.0.0.1:1/x"},
            1,
            "error: the store's database does not answer",
        ),
    ],
)
def test_a_user_mistake_is_one_line_and_its_exit_code(tmp_path, argv, env, code: int, says: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n  x: : :\n")
    (tmp_path / "retrain.yaml").write_text("work_dir: work\nmin_new_episodes: 0\n")
    (tmp_path / "nomodel.yaml").write_text(
        "model: /nowhere/model\noutput_dir: out\ndata: {sources: [{kind: sim}]}\n"
    )
    result = _run_in(tmp_path, *argv, **env)
    assert result.returncode == code, result.stderr
    assert result.stderr.startswith(says), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line: no traceback, no log echo


def test_debug_shows_the_traceback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = _run_in(tmp_path, "models", "show", "nope", "--debug")
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert "RegistryError" in result.stderr


def test_trajectories_list_says_where_it_looked_and_speaks_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    empty = _run_in(tmp_path, "trajectories", "list")
    assert empty.returncode == 0
    assert empty.stderr.strip() == f"no episodes in sqlite:///{tmp_path / 'store.db'}"
    assert _run_in(tmp_path, "trajectories", "list", "--json").stdout.strip() == "[]"
    from agent.store import TrajectoryStore
    from agent.trajectory import Episode

    store = TrajectoryStore(f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "shots")
    store.save_episode(Episode(id="0123456789abcdef", goal="Turn on Wi-Fi"))
    store.engine.dispose()
    listed = _run_in(tmp_path, "trajectories", "list", "--json")
    assert [e["id"] for e in __import__("json").loads(listed.stdout)] == ["0123456789abcdef"]
    shown = _run_in(tmp_path, "trajectories", "show", "01234567")  # the short id the demo prints
    assert shown.returncode == 0, shown.stderr
    assert '"goal": "Turn on Wi-Fi"' in shown.stdout
    table = _run_in(tmp_path, "trajectories", "list").stdout.splitlines()
    assert table[0].split() == ["ID", "CREATED", "STATUS", "STEPS", "GOAL"]
    assert table[1].split()[0] == "0123456789abcdef"  # the whole id, aligned under its header
    assert table[1].endswith("Turn on Wi-Fi")
    assert table[1].index("Turn on Wi-Fi") == table[0].index("GOAL")


def test_keys_list_speaks_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    assert json.loads(_run_in(tmp_path, "keys", "list", "--json").stdout) == []
    created = _run_in(tmp_path, "keys", "create", "ops")
    assert created.returncode == 0, created.stderr
    listed = json.loads(_run_in(tmp_path, "keys", "list", "--json").stdout)
    assert [(k["name"], k["scopes"], k["revoked_at"]) for k in listed] == [("ops", ["agent"], None)]


def test_serve_on_a_port_in_use_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_in(tmp_path, "serve", "--port", str(port))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in result.stderr
