"""API keys: random tokens shown once, stored as SHA-256 hashes, each with scopes.

A key looks like ``uis1_<id>_<secret>``; the id finds the row, the hash of the whole key is
compared in constant time. Keys are 256-bit random, so a fast hash is the right tool (there is
nothing to brute-force), as with the access tokens of large code hosts. Scopes: ``agent`` (tasks,
predict, devices, trajectories, models read) and ``admin`` (everything, including model swap,
lease release and device connect).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa

from agent.store import lock_for_migration
from agent.trajectory import as_utc, utcnow
from serve.db import api_keys

log = logging.getLogger(__name__)

LAST_USED_EVERY = timedelta(minutes=1)  # how fresh a key's last_used_at is kept


class Scope(StrEnum):
    AGENT = "agent"
    ADMIN = "admin"


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    scopes: frozenset[Scope]
    created_at: datetime
    revoked_at: datetime | None

    def allows(self, scope: Scope) -> bool:
        return Scope.ADMIN in self.scopes or scope in self.scopes


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class KeyStore:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def create(self, name: str, scopes: set[Scope]) -> tuple[ApiKey, str]:
        """A new key; the token is returned once and never stored."""
        if name.startswith(FILE_PREFIX):
            raise ValueError(f"names starting with {FILE_PREFIX!r} are reserved for keys from a keys file")
        token = new_token()
        key_id = token.split("_")[1]
        now = utcnow()
        with self.engine.begin() as conn:
            conn.execute(
                sa.insert(api_keys).values(
                    id=key_id, name=name, hash=_hash(token), scopes=",".join(sorted(scopes)), created_at=now
                )
            )
        return ApiKey(key_id, name, frozenset(scopes), now, None), token

    def verify(self, token: str) -> ApiKey | None:
        parts = token.split("_")
        if len(parts) < 3 or parts[0] != "uis1":
            return None
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(api_keys).where(api_keys.c.id == parts[1])).first()
        if row is None or row.revoked_at is not None or not hmac.compare_digest(row.hash, _hash(token)):
            return None
        now = utcnow()
        if row.last_used_at is None or now - as_utc(row.last_used_at) > LAST_USED_EVERY:
            # A write at most once a minute per key, not one per request; and a busy database
            # never fails the request over it.
            try:
                with self.engine.begin() as conn:
                    conn.execute(sa.update(api_keys).where(api_keys.c.id == row.id).values(last_used_at=now))
            except sa.exc.OperationalError as exc:
                log.debug("could not record the use of key %s: %s", row.id, exc)
        return self._key(row)

    def list(self) -> list[ApiKey]:
        with self.engine.connect() as conn:
            return [self._key(r) for r in conn.execute(sa.select(api_keys).order_by(api_keys.c.created_at))]

    def revoke(self, key_id: str) -> bool:
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            ).rowcount
        return bool(done)

    @staticmethod
    def _key(row: sa.Row) -> ApiKey:  # type: ignore[type-arg]
        scopes = frozenset(Scope(s) for s in row.scopes.split(",") if s)
        return ApiKey(row.id, row.name, scopes, row.created_at, row.revoked_at)


FILE_PREFIX = "file:"  # names of keys managed by a keys file


class KeysFileError(ValueError):
    """A keys file that cannot be applied; the message names the line, never the token."""


@dataclass(frozen=True)
class FileKey:
    name: str
    scopes: frozenset[Scope]
    token: str

    @property
    def id(self) -> str:
        return self.token.split("_")[1]  # read_keys_file checked the shape uis1_<id>_<secret>


def new_token() -> str:
    return f"uis1_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def read_keys_file(path: Path) -> list[FileKey]:
    """Parse a keys file: ``NAME SCOPES TOKEN`` per line (scopes comma-separated), ``#`` comments."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise KeysFileError(f"cannot read keys file {path}: {exc.strerror}") from exc
    keys: list[FileKey] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise KeysFileError(f"{path}:{number}: expected NAME SCOPES TOKEN, got {len(parts)} field(s)")
        name, scope_text, token = parts
        try:
            scopes = frozenset(Scope(s) for s in scope_text.split(",") if s)
        except ValueError:
            raise KeysFileError(
                f"{path}:{number}: scopes must be agent and/or admin, got {scope_text!r}"
            ) from None
        pieces = token.split("_")
        if len(pieces) < 3 or pieces[0] != "uis1" or len(pieces[1]) != 12 or len(token) < 40:
            raise KeysFileError(f"{path}:{number}: not a uis1 key (make one with `uis1 keys generate`)")
        if not scopes:
            raise KeysFileError(f"{path}:{number}: no scopes")
        if pieces[1] in seen:
            raise KeysFileError(f"{path}:{number}: a second key with id {pieces[1]}")
        seen.add(pieces[1])
        keys.append(FileKey(name, scopes, token))
    return keys


def sync_keys_file(store: KeyStore, path: Path) -> tuple[int, int]:
    """Make the file's keys active and revoke file-managed keys no longer in it: (active, revoked).

    Only hashes reach the database. A key id that already belongs to a key made otherwise, or to a
    different token, is refused rather than overwritten.
    """
    wanted = read_keys_file(path)
    ids = {key.id: key for key in wanted}
    now = utcnow()
    revoked = 0
    with store.engine.begin() as conn:
        lock_for_migration(conn)  # replicas starting together apply the file one at a time
        rows = {r.id: r for r in conn.execute(sa.select(api_keys))}
        for key_id, key in ids.items():
            row = rows.get(key_id)
            values = {"name": FILE_PREFIX + key.name, "scopes": ",".join(sorted(key.scopes))}
            if row is None:
                conn.execute(
                    sa.insert(api_keys).values(id=key_id, hash=_hash(key.token), created_at=now, **values)
                )
                continue
            if not row.name.startswith(FILE_PREFIX) or not hmac.compare_digest(row.hash, _hash(key.token)):
                raise KeysFileError(
                    f"keys file {path}: key id {key_id} ({key.name}) is already taken by another key"
                )
            conn.execute(sa.update(api_keys).where(api_keys.c.id == key_id).values(revoked_at=None, **values))
        for key_id, row in rows.items():
            if row.name.startswith(FILE_PREFIX) and key_id not in ids and row.revoked_at is None:
                conn.execute(sa.update(api_keys).where(api_keys.c.id == key_id).values(revoked_at=now))
                revoked += 1
    return len(ids), revoked
