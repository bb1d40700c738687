"""The trajectory store: episodes and steps in a SQL database, screenshots as content-addressed files.

SQLite (WAL) is the embedded default; PostgreSQL serves several service replicas. The schema is
managed by alembic migrations (``agent/migrations``), applied by ``TrajectoryStore.migrate``.
Rows hold the queryable fields; each step's full schema-v1 record is kept as JSON beside them, so
the database never loses a field the schema has. Screenshots live under ``<root>/ab/cdef....png``
by SHA-256, written once however often the screen repeats.

Deleting an episode (``delete_episode``, by a person or by the episode retention) removes its rows
and the screenshots no other episode shows, and leaves one row in ``episode_deletions``: who, when,
why. Nothing of the episode is left to curate or export (an export made before holds it still:
the interchange format has no ids to tell it by when it is imported again).

The store is synchronous (SQLAlchemy's core API) and thread-safe; async callers run it in a worker
thread (``asyncio.to_thread``). Every write commits before returning: a step is durable before
the episode loop sends the next action.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from agent.trajectory import Episode, EpisodeStatus, ScreenshotRef, Step, utcnow

log = logging.getLogger(__name__)

metadata = sa.MetaData()

episodes = sa.Table(
    "episodes",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("device_serial", sa.String(128), index=True),
    sa.Column("model_version", sa.String(256), index=True),
    sa.Column("is_successful", sa.Boolean),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("record", sa.JSON, nullable=False),  # the Episode without its steps
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column(
        "episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("screenshot_sha256", sa.String(64), index=True),
    sa.Column("model_version", sa.String(256)),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("record", sa.JSON, nullable=False),  # the whole Step
)

labels = sa.Table(
    "episode_labels",
    metadata,
    sa.Column(
        "episode_id", sa.String(64), sa.ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False, index=True),
)

# A deleted episode leaves one row here and nothing else: who deleted it, when, why.
deletions = sa.Table(
    "episode_deletions",
    metadata,
    sa.Column("episode_id", sa.String(64), primary_key=True),
    sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("deleted_by", sa.String(128), nullable=False),
    sa.Column("reason", sa.String(256)),
)


@dataclass(frozen=True)
class Deletion:
    episode_id: str
    deleted_at: datetime
    deleted_by: str
    reason: str | None


class StoreError(RuntimeError):
    pass


class ScreenshotStore:
    """Content-addressed PNG files: ``put`` returns the reference, writing only new content."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}.png"

    def put(self, png: bytes, width: int | None = None, height: int | None = None) -> ScreenshotRef:
        digest = hashlib.sha256(png).hexdigest()
        target = self.path(digest)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(png)
            os.replace(tmp, target)  # atomic: a reader never sees half a file
        size = {"width": width, "height": height} if width and height else None
        return ScreenshotRef.model_validate({"uri": str(target), "sha256": digest, "size": size})

    def get(self, ref: ScreenshotRef) -> bytes:
        path = self.path(ref.sha256) if ref.sha256 else Path(ref.uri)
        return path.read_bytes()

    def delete(self, sha256: str) -> bool:
        try:
            self.path(sha256).unlink()
        except FileNotFoundError:
            return False
        return True


@dataclass(frozen=True)
class EpisodeQuery:
    status: EpisodeStatus | None = None
    device_serial: str | None = None
    model_version: str | None = None
    label: tuple[str, str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
    offset: int = 0
    oldest_first: bool = False


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


MIGRATION_LOCK = 0x75697331  # "uis1": one PostgreSQL advisory lock for every migration of the project


def lock_for_migration(connection: sa.Connection) -> None:
    """Serialise migrations of replicas that start together (PostgreSQL; SQLite locks the file)."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})


def make_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


class TrajectoryStore:
    def __init__(self, url: str, screenshot_dir: Path) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.screenshots = ScreenshotStore(screenshot_dir)

    # -- schema ---------------------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the database schema to the newest migration."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        config.attributes["connection_url"] = self.url
        with self.engine.begin() as connection:
            lock_for_migration(connection)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    # -- writes ---------------------------------------------------------------------------------
    def _episode_row(self, episode: Episode) -> dict[str, Any]:
        return {
            "goal": episode.goal,
            "status": episode.status.value,
            "device_serial": episode.device.serial if episode.device else None,
            "model_version": episode.model_version,
            "is_successful": episode.is_successful,
            "created_at": episode.created_at,
            "finished_at": episode.finished_at,
            "record": episode.model_dump(mode="json", exclude={"steps"}),
        }

    def save_episode(self, episode: Episode) -> None:
        """Insert or update the episode's own fields and labels (not its steps)."""
        row = self._episode_row(episode)
        with self.engine.begin() as conn:
            updated = conn.execute(
                sa.update(episodes).where(episodes.c.id == episode.id).values(**row)
            ).rowcount
            if not updated:
                deleted = sa.select(deletions.c.episode_id).where(deletions.c.episode_id == episode.id)
                if conn.execute(deleted).first() is not None:
                    return  # a late write (feedback, the judge, a shutdown) after a deletion
                conn.execute(sa.insert(episodes).values(id=episode.id, **row))
            conn.execute(sa.delete(labels).where(labels.c.episode_id == episode.id))
            if episode.labels:
                conn.execute(
                    sa.insert(labels),
                    [{"episode_id": episode.id, "key": k, "value": v} for k, v in episode.labels.items()],
                )

    def transition(self, episode: Episode, expected: EpisodeStatus) -> bool:
        """Save the episode's own fields only if its stored status is still ``expected``.

        The compare-and-set that lets several service replicas share one queue: of two replicas
        that try to start (or cancel) the same pending task, exactly one succeeds.
        """
        row = self._episode_row(episode)
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.update(episodes)
                .where(episodes.c.id == episode.id, episodes.c.status == expected.value)
                .values(**row)
            ).rowcount
        return bool(done)

    def count(self, status: EpisodeStatus, *, model_version: str | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(episodes).where(episodes.c.status == status.value)
        if model_version is not None:
            stmt = stmt.where(episodes.c.model_version == model_version)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def save_step(self, episode_id: str, step: Step) -> None:
        """Insert or replace one step; committed when this returns."""
        row = {
            "screenshot_sha256": step.screenshot.sha256,
            "model_version": step.model_version,
            "source": step.source.value,
            "record": step.model_dump(mode="json"),
        }
        with self.engine.begin() as conn:
            updated = conn.execute(
                sa.update(steps)
                .where(steps.c.episode_id == episode_id, steps.c.idx == step.index)
                .values(**row)
            ).rowcount
            if not updated:
                conn.execute(sa.insert(steps).values(episode_id=episode_id, idx=step.index, **row))

    def save(self, episode: Episode) -> None:
        """An episode with all its steps (imports)."""
        self.save_episode(episode)
        for step in episode.steps:
            self.save_step(episode.id, step)

    # -- reads ----------------------------------------------------------------------------------
    def resolve_id(self, prefix: str) -> str:
        """The id of the one episode whose id is ``prefix`` or starts with it (ids are printed short).

        Raises KeyError when none does, LookupError naming the count when several do."""
        with self.engine.connect() as conn:
            if conn.execute(sa.select(episodes.c.id).where(episodes.c.id == prefix)).first() is not None:
                return prefix
            escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            found = (
                conn.execute(
                    sa.select(episodes.c.id).where(episodes.c.id.like(f"{escaped}%", escape="\\")).limit(11)
                )
                .scalars()
                .all()
            )
        if not found:
            raise KeyError(prefix)
        if len(found) > 1:
            many = "more than 10" if len(found) > 10 else str(len(found))
            raise LookupError(f"{many} episodes start with {prefix!r}: give more of the id")
        return str(found[0])

    def get(self, episode_id: str) -> Episode:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(episodes.c.record).where(episodes.c.id == episode_id)).first()
            if row is None:
                raise KeyError(episode_id)
            step_rows = conn.execute(
                sa.select(steps.c.record).where(steps.c.episode_id == episode_id).order_by(steps.c.idx)
            ).all()
        return Episode.model_validate({**row.record, "steps": [r.record for r in step_rows]})

    def query(self, q: EpisodeQuery | None = None) -> list[Episode]:
        q = q or EpisodeQuery()
        order = episodes.c.created_at.asc() if q.oldest_first else episodes.c.created_at.desc()
        stmt = sa.select(episodes.c.id).order_by(order, episodes.c.id)
        if q.status is not None:
            stmt = stmt.where(episodes.c.status == q.status.value)
        if q.device_serial is not None:
            stmt = stmt.where(episodes.c.device_serial == q.device_serial)
        if q.model_version is not None:
            stmt = stmt.where(episodes.c.model_version == q.model_version)
        if q.since is not None:
            stmt = stmt.where(episodes.c.created_at >= q.since)
        if q.until is not None:
            stmt = stmt.where(episodes.c.created_at < q.until)
        if q.label is not None:
            key, value = q.label
            stmt = stmt.where(
                sa.exists().where(
                    labels.c.episode_id == episodes.c.id, labels.c.key == key, labels.c.value == value
                )
            )
        stmt = stmt.limit(q.limit).offset(q.offset)
        with self.engine.connect() as conn:
            ids = [r.id for r in conn.execute(stmt)]
        return [self.get(i) for i in ids]

    def iter_all(self, batch: int = 200) -> Iterator[Episode]:
        offset = 0
        while True:
            page = self.query(EpisodeQuery(limit=batch, offset=offset))
            if not page:
                return
            yield from page
            offset += batch

    # -- retention ------------------------------------------------------------------------------
    def drop_screenshots_older_than(self, days: float, *, now: datetime | None = None) -> int:
        """Delete screenshot files of episodes finished more than ``days`` ago; keep all rows.

        A file still referenced by a newer episode (the same screen, deduplicated) is kept.
        """
        cutoff = (now or utcnow()) - timedelta(days=days)
        with self.engine.connect() as conn:
            old = {
                r[0]
                for r in conn.execute(
                    sa.select(steps.c.screenshot_sha256)
                    .join(episodes, episodes.c.id == steps.c.episode_id)
                    .where(episodes.c.created_at < cutoff, steps.c.screenshot_sha256.is_not(None))
                )
            }
            recent = {
                r[0]
                for r in conn.execute(
                    sa.select(steps.c.screenshot_sha256)
                    .join(episodes, episodes.c.id == steps.c.episode_id)
                    .where(episodes.c.created_at >= cutoff, steps.c.screenshot_sha256.is_not(None))
                )
            }
        return sum(self.screenshots.delete(digest) for digest in old - recent)

    def delete_episode(self, episode_id: str, *, by: str, reason: str | None = None) -> bool:
        """Delete the episode, its steps, labels and the screenshots no other episode shows, and
        record who deleted it (``deletions``). False when there was no such episode."""
        with self.engine.begin() as conn:
            shots = set(
                conn.execute(
                    sa.select(steps.c.screenshot_sha256).where(
                        steps.c.episode_id == episode_id, steps.c.screenshot_sha256.is_not(None)
                    )
                ).scalars()
            )
            conn.execute(sa.delete(steps).where(steps.c.episode_id == episode_id))
            conn.execute(sa.delete(labels).where(labels.c.episode_id == episode_id))
            if not conn.execute(sa.delete(episodes).where(episodes.c.id == episode_id)).rowcount:
                return False
            conn.execute(
                sa.insert(deletions).values(
                    episode_id=episode_id,
                    deleted_at=utcnow(),
                    deleted_by=by[:128],
                    reason=(reason or None) and reason[:256],
                )
            )
            shared = set(
                conn.execute(
                    sa.select(steps.c.screenshot_sha256).where(steps.c.screenshot_sha256.in_(shots))
                ).scalars()
            )
        for digest in shots - shared:
            self.screenshots.delete(digest)
        return True

    def delete_episodes_older_than(self, days: float, *, now: datetime | None = None) -> int:
        """Delete every finished episode created more than ``days`` ago (the episode retention);
        each deletion is recorded as by ``retention``."""
        cutoff = (now or utcnow()) - timedelta(days=days)
        finished = [s.value for s in EpisodeStatus if s.finished]
        with self.engine.connect() as conn:
            old = list(
                conn.execute(
                    sa.select(episodes.c.id).where(
                        episodes.c.created_at < cutoff, episodes.c.status.in_(finished)
                    )
                ).scalars()
            )
        reason = f"older than the episode retention of {days:g} days"
        deleted = 0
        for episode_id in old:
            try:
                deleted += self.delete_episode(episode_id, by="retention", reason=reason)
            except sa.exc.SQLAlchemyError as exc:  # one episode's trouble does not stop the sweep
                log.warning("retention could not delete episode %s: %s", episode_id, exc)
        return deleted

    def deletions(self, *, limit: int = 100) -> list[Deletion]:
        """The latest deletions, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(deletions)
                .order_by(deletions.c.deleted_at.desc(), deletions.c.episode_id)
                .limit(limit)
            )
            return [Deletion(r.episode_id, r.deleted_at, r.deleted_by, r.reason) for r in rows]

    # -- interchange ----------------------------------------------------------------------------
    def export_jsonl(self, episodes_: Iterable[Episode], out_dir: Path) -> Path:
        """Write ``episodes.jsonl`` plus the screenshots it references under ``out_dir/images``."""
        from agent.interchange import episode_to_record

        images = out_dir / "images"
        images.mkdir(parents=True, exist_ok=True)
        target = out_dir / "episodes.jsonl"
        with target.open("w", encoding="utf-8") as fh:
            for episode in episodes_:
                record = episode_to_record(_with_relative_images(episode, self.screenshots, images))
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        return target

    def import_jsonl(self, path: Path) -> list[Episode]:
        """Read an interchange file; screenshots found beside it are copied into the store."""
        from agent.interchange import load_jsonl

        imported = []
        for episode in load_jsonl(path):
            new_steps = []
            for step in episode.steps:
                image = path.parent / step.screenshot.uri  # absolute URIs stay absolute
                if image.is_file():
                    ref = self.screenshots.put(image.read_bytes())
                    step = step.model_copy(update={"screenshot": ref})
                new_steps.append(step)
            stored = episode.model_copy(update={"steps": new_steps})
            self.save(stored)
            imported.append(stored)
        return imported


def _with_relative_images(episode: Episode, screenshots: ScreenshotStore, images: Path) -> Episode:
    new_steps: list[Step] = []
    for step in episode.steps:
        ref = step.screenshot
        if ref.sha256 and screenshots.path(ref.sha256).is_file():
            dest = images / f"{ref.sha256}.png"
            if not dest.exists():
                dest.write_bytes(screenshots.path(ref.sha256).read_bytes())
            step = step.model_copy(
                update={"screenshot": ref.model_copy(update={"uri": f"images/{dest.name}"})}
            )
        new_steps.append(step)
    return episode.model_copy(update={"steps": new_steps})
