"""Retention: finished episodes and screenshots older than their retention periods are deleted.

Both periods are off by default (``store.episode_retention_days``, ``store.screenshot_retention_days``).
When either is set, the service sweeps once at start and then every hour; several replicas may
sweep at once (a deletion happens once, the others find nothing). Each deleted episode is recorded
in the store's deletions, as by ``retention``.
"""

from __future__ import annotations

import asyncio
import logging

from agent.settings import StoreSettings
from agent.store import TrajectoryStore

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 3600.0


def sweep(store: TrajectoryStore, settings: StoreSettings) -> tuple[int, int]:
    """One sweep: (episodes deleted, screenshot files deleted)."""
    episodes = shots = 0
    if settings.episode_retention_days is not None:
        episodes = store.delete_episodes_older_than(settings.episode_retention_days)
    if settings.screenshot_retention_days is not None:
        shots = store.drop_screenshots_older_than(settings.screenshot_retention_days)
    if episodes or shots:
        log.info(
            "retention deleted %d episode(s) and %d screenshot file(s)",
            episodes,
            shots,
            extra={"episodes": episodes, "screenshots": shots},
        )
    return episodes, shots


def enabled(settings: StoreSettings) -> bool:
    return settings.episode_retention_days is not None or settings.screenshot_retention_days is not None


async def sweep_forever(
    store: TrajectoryStore, settings: StoreSettings, every_s: float = SWEEP_EVERY_S
) -> None:
    while True:
        try:
            await asyncio.to_thread(sweep, store, settings)
        except Exception:  # a database hiccup: the next sweep tries again
            log.exception("retention sweep failed")
        await asyncio.sleep(every_s)
