"""Keys managed by a file (a mounted secret): applied at start, removed lines revoked, hashes only."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from agent.store import make_engine
from serve import db as serve_db
from serve.api.auth import FILE_PREFIX, KeysFileError, KeyStore, Scope, read_keys_file, sync_keys_file


def _line(runner: CliRunner, name: str, admin: bool = False) -> str:
    from serve.cli.keys import keys_app

    result = runner.invoke(keys_app, ["generate", name, *(["--admin"] if admin else [])])
    assert result.exit_code == 0, result.output
    return result.output.strip()


@pytest.fixture
def keys(tmp_path: Path) -> KeyStore:
    store = KeyStore(make_engine(f"sqlite:///{tmp_path / 'keys.db'}"))
    serve_db.migrate(store.engine)
    return store


def test_a_keys_file_is_applied_and_a_removed_line_revokes_its_key(tmp_path: Path, keys: KeyStore) -> None:
    runner = CliRunner()
    ops, ci = _line(runner, "ops", admin=True), _line(runner, "ci")
    assert ops.split()[:2] == ["ops", "admin,agent"]
    assert ci.split()[:2] == ["ci", "agent"]
    cli_key, cli_token = keys.create("alice", {Scope.AGENT})
    path = tmp_path / "keys"
    path.write_text(f"# managed keys\n{ops}\n\n{ci}  # the CI runner\n")

    assert sync_keys_file(keys, path) == (2, 0)
    ops_key, ci_key = keys.verify(ops.split()[2]), keys.verify(ci.split()[2])
    assert ops_key is not None
    assert ops_key.allows(Scope.ADMIN)
    assert ops_key.name == FILE_PREFIX + "ops"
    assert ci_key is not None
    assert ci_key.allows(Scope.AGENT)
    assert not ci_key.allows(Scope.ADMIN)
    with keys.engine.connect() as conn:  # only hashes are stored
        stored = " ".join(str(v) for row in conn.execute(sa.text("SELECT * FROM api_keys")) for v in row)
    assert ops.split()[2] not in stored
    assert ci.split()[2] not in stored

    assert sync_keys_file(keys, path) == (2, 0)  # applying again changes nothing (replicas restart)
    path.write_text(f"{ops}\n")
    assert sync_keys_file(keys, path) == (1, 1)
    assert keys.verify(ci.split()[2]) is None  # its line is gone: revoked
    assert keys.verify(ops.split()[2]) is not None
    assert keys.verify(cli_token) is not None
    assert cli_key.name == "alice"
    path.write_text(f"{ops}\n{ci}\n")
    assert sync_keys_file(keys, path) == (2, 0)
    assert keys.verify(ci.split()[2]) is not None  # put back: active again


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("ops admin\n", "expected NAME SCOPES TOKEN, got 2"),
        ("ops root uis1_0123456789ab_" + "x" * 43 + "\n", "scopes must be agent and/or admin"),
        ("ops agent hunter2hunter2\n", "not a uis1 key"),
        ("a agent uis1_0123456789ab_" + "x" * 43 + "\nb agent uis1_0123456789ab_" + "y" * 43, "a second key"),
    ],
)
def test_a_bad_keys_file_names_the_line_but_never_the_token(
    tmp_path: Path, keys: KeyStore, content: str, message: str
) -> None:
    path = tmp_path / "keys"
    path.write_text(content)
    with pytest.raises(KeysFileError, match=message) as error:
        sync_keys_file(keys, path)
    assert "x" * 20 not in str(error.value)
    assert "hunter2" not in str(error.value)
    assert f"{path}:" in str(error.value)
    assert keys.list() == []  # nothing applied


def test_a_file_key_cannot_take_over_an_existing_key_id(tmp_path: Path, keys: KeyStore) -> None:
    made, token = keys.create("alice", {Scope.AGENT})
    forged = f"uis1_{made.id}_" + "z" * 43
    path = tmp_path / "keys"
    path.write_text(f"mallory admin,agent {forged}\n")
    with pytest.raises(KeysFileError, match="already taken"):
        sync_keys_file(keys, path)
    assert keys.verify(forged) is None
    assert keys.verify(token) is not None
    with pytest.raises(ValueError, match="reserved"):
        keys.create(FILE_PREFIX + "x", {Scope.AGENT})
    with pytest.raises(KeysFileError, match="cannot read keys file"):
        read_keys_file(tmp_path / "missing")


def test_the_service_applies_its_keys_file_at_start(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    line = _line(CliRunner(), "dashboard")
    path = tmp_path / "service-keys"
    path.write_text(line + "\n")
    service = make_service(api_keys_file=path)
    token = line.split()[2]
    assert service.client(token).get("/v1/tasks").status_code == 200
    assert service.client(token).post("/v1/jobs", json={}).status_code == 403  # agent scope only
