"""Which version a task is pinned to, and what is refused, around an in-place swap (both databases)."""

from __future__ import annotations

import asyncio

import pytest

from agent.jobs import JobStore
from agent.prompt import PromptSettings
from agent.registry import ModelRegistry
from serve.swap import HOLD_LOCK, LOADED_ALIAS_PREFIX
from serve.task_request import TaskRequest, UnknownModel
from serve.versions import VersionRouter


def test_a_task_submitted_while_an_in_place_swap_holds_is_admitted_and_pinned_to_the_new_version(  # type: ignore[no-untyped-def]
    store,
) -> None:
    import sqlalchemy as sa

    with store.engine.begin() as conn:  # the PostgreSQL database is shared by the session's tests
        for table in ("model_events", "model_aliases", "model_versions", "job_locks"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    registry, jobs = ModelRegistry(store.engine), JobStore(store.engine)
    registry.register("sft", served_name="policy", base="/m/sft", kind="base")
    registry.register("nightly", served_name="policy", base="/m/nightly", kind="base", parent="sft")
    registry.promote("sft", actor="test")
    router = VersionRouter(registry, None, PromptSettings(), jobs)
    task = TaskRequest(goal="Turn on Wi-Fi")
    # The swap has reloaded the engine and is canarying it; the default alias has not moved yet.
    registry.set_alias(LOADED_ALIAS_PREFIX + "policy", "nightly", actor="swap")
    jobs.acquire(HOLD_LOCK, "hold-1", ttl_s=600)
    asyncio.run(router.admit(task))  # accepted: it waits for the hold, not refused
    registry.promote("nightly", actor="swap")
    jobs.release(HOLD_LOCK, "hold-1")
    assert router.route(task)[1] == "nightly"  # pinned when it starts, to what the engine holds
    # Without a swap in progress, a version the engine no longer holds is refused at once.
    with pytest.raises(UnknownModel, match="not being served"):
        asyncio.run(router.admit(TaskRequest(goal="Turn on Wi-Fi", model="sft")))
    with pytest.raises(UnknownModel, match="no model version"):
        asyncio.run(router.admit(TaskRequest(goal="Turn on Wi-Fi", model="nope")))
