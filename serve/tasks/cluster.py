"""What several service replicas share through the database: device leases and task controls.

Every replica sees the same phones (the same adb servers) and the same task queue (pending
episodes in the store). Two things must then hold across processes, not only inside one:

- **A phone runs one episode at a time.** Before an episode starts, its replica takes a row in
  ``device_leases`` keyed by the device (``<adb server>/<serial>``); the insert fails if another
  replica holds it. The holder renews the row while the episode runs; a replica that dies stops
  renewing, and after ``lease_ttl_s`` the phone is free again and that replica's running episodes
  are marked ``interrupted`` by whichever replica sweeps first. Lease times come from the
  replicas' clocks, which must agree to well under the TTL (NTP).
- **A client may talk to any replica.** Cancel, pause, takeover and resume are written to
  ``task_controls``; the replica running the episode applies them within one poll
  (``control_poll_s``), or at once when it is the one that got the request.

Replicas name themselves with ``UIS1_REPLICA_ID`` (default: the host name). A restarted replica
drops the leases of its previous life at once instead of waiting for them to expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from agent.trajectory import utcnow
from serve.db import device_leases, task_controls


@dataclass(frozen=True)
class Control:
    cancel: bool = False
    paused: bool = False
    action: dict[str, Any] | None = None


def device_key(server: str, serial: str) -> str:
    return f"{server}/{serial}"


class Cluster:
    def __init__(self, engine: sa.Engine, replica: str, lease_ttl_s: float = 30.0) -> None:
        self.engine = engine
        self.replica = replica
        self.lease_ttl = timedelta(seconds=lease_ttl_s)

    # -- device leases ------------------------------------------------------------------------------
    def lease(self, device: str, episode_id: str) -> bool:
        """Take the device for an episode; False while another live lease holds it."""
        now = utcnow()
        row = {
            "episode_id": episode_id,
            "replica": self.replica,
            "acquired_at": now,
            "expires_at": now + self.lease_ttl,
        }
        with self.engine.begin() as conn:
            taken = conn.execute(
                sa.update(device_leases)
                .where(device_leases.c.device == device, device_leases.c.expires_at <= now)
                .values(**row)
            ).rowcount
            if taken:
                return True
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(device_leases).values(device=device, **row))
        except sa.exc.IntegrityError:
            return False  # held by a live lease (or taken over in between by another replica)
        return True

    def renew(self, episode_ids: list[str]) -> None:
        if not episode_ids:
            return
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(device_leases)
                .where(device_leases.c.replica == self.replica, device_leases.c.episode_id.in_(episode_ids))
                .values(expires_at=utcnow() + self.lease_ttl)
            )

    def release(self, episode_id: str) -> None:
        """Give up this replica's lease for the episode (another replica may hold one for it too,
        for a moment, while both try to start it: that one is not ours to drop)."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.delete(device_leases).where(
                    device_leases.c.episode_id == episode_id, device_leases.c.replica == self.replica
                )
            )

    def end(self, episode_id: str) -> None:
        """The episode is over: drop every lease and control request it has, on any replica."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(device_leases).where(device_leases.c.episode_id == episode_id))
            conn.execute(sa.delete(task_controls).where(task_controls.c.episode_id == episode_id))

    def release_device(self, device: str) -> str | None:
        """Free a device whoever holds it (admin); returns the episode that held it."""
        with self.engine.begin() as conn:
            row = conn.execute(
                sa.select(device_leases.c.episode_id).where(device_leases.c.device == device)
            ).first()
            conn.execute(sa.delete(device_leases).where(device_leases.c.device == device))
        return row.episode_id if row else None

    def holders(self) -> dict[str, str]:
        """Live leases: device -> episode id."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(device_leases.c.device, device_leases.c.episode_id).where(
                    device_leases.c.expires_at > utcnow()
                )
            )
            return {r.device: r.episode_id for r in rows}

    def drop_own(self) -> set[str]:
        """Forget the leases of this replica's previous life; returns their episodes."""
        with self.engine.begin() as conn:
            rows = conn.execute(
                sa.select(device_leases.c.episode_id).where(device_leases.c.replica == self.replica)
            )
            episodes = {r.episode_id for r in rows}
            conn.execute(sa.delete(device_leases).where(device_leases.c.replica == self.replica))
        return episodes

    # -- task controls ------------------------------------------------------------------------------
    def request(self, episode_id: str, **changes: Any) -> None:
        """Record a control request (``cancel``, ``paused``, ``action``) for the episode's owner."""
        changes["updated_at"] = utcnow()
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.update(task_controls).where(task_controls.c.episode_id == episode_id).values(**changes)
            ).rowcount
            if not done:
                conn.execute(sa.insert(task_controls).values(episode_id=episode_id, **changes))

    def controls(self, episode_ids: list[str]) -> dict[str, Control]:
        if not episode_ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(task_controls).where(task_controls.c.episode_id.in_(episode_ids)))
            return {r.episode_id: Control(bool(r.cancel), bool(r.paused), r.action) for r in rows}

    def control(self, episode_id: str) -> Control:
        return self.controls([episode_id]).get(episode_id, Control())
