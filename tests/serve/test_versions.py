"""Which version a task is pinned to, and what is refused, around an in-place swap (both databases)."""

from __future__ import annotations

import asyncio

import pytest

from agent.jobs import JobStore
from agent.prompt import PromptSettings
from agent.registry import ModelRegistry
from serve.models.routing import ModelRouter, Route, UnknownModel
from serve.models.swap import HOLD_LOCK, LOADED_ALIAS_PREFIX


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
    router = ModelRouter(registry, None, PromptSettings(), jobs)
    # The swap has reloaded the engine and is canarying it; the default alias has not moved yet.
    registry.set_alias(LOADED_ALIAS_PREFIX + "policy", "nightly", actor="swap")
    jobs.acquire(HOLD_LOCK, "hold-1", ttl_s=600)
    asyncio.run(router.admit(None))  # accepted: it waits for the hold, not refused
    registry.promote("nightly", actor="swap")
    jobs.release(HOLD_LOCK, "hold-1")
    assert router.route(None).version == "nightly"  # pinned when it starts, to what the engine holds
    # Without a swap in progress, a version the engine no longer holds is refused at once.
    with pytest.raises(UnknownModel, match="not being served"):
        asyncio.run(router.admit("sft"))
    with pytest.raises(UnknownModel, match="no model version"):
        asyncio.run(router.admit("nope"))


def test_a_route_is_resolved_once_and_carries_version_engine_and_prompt(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The one answer to "which version serves this task": the version, the served name, the engine
    (a blue/green engine's URL, else the primary) and the system prompt the version was trained
    with, in one frozen value; a promote after it was resolved changes nothing in it, and the
    router hands the policy call to that engine's client."""
    import dataclasses

    from agent.store import TrajectoryStore
    from agent.vllm_policy import VllmSettings
    from serve.models.engines import Engines

    store = TrajectoryStore(f"sqlite:///{tmp_path / 'route.db'}", tmp_path / "shots")
    store.migrate()
    registry = ModelRegistry(store.engine)
    registry.register("sft", served_name="policy", base="/m/sft", kind="base")
    registry.register(
        "green",
        served_name="green",
        base="/m/green",
        kind="full",
        parent="sft",
        endpoint="http://127.0.0.1:9/",
        info={"system_prompt": "green's own"},
    )
    registry.promote("sft", actor="test")
    engines = Engines(VllmSettings(base_url="http://127.0.0.1:8/"))
    service_prompt = PromptSettings(system_prompt="the service's")
    router = ModelRouter(registry, engines, service_prompt, JobStore(store.engine))
    first = router.route(None)
    assert first == Route("sft", "policy", None, service_prompt)
    assert router.policy_for(first) is engines.primary
    registry.promote("green", actor="test")
    assert first.version == "sft"  # frozen: the task that resolved it keeps it
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.version = "green"  # type: ignore[misc]
    second = router.route(None)
    assert (second.version, second.served_name, second.endpoint) == ("green", "green", "http://127.0.0.1:9/")
    assert second.prompt == dataclasses.replace(service_prompt, system_prompt="green's own")
    engine = router.policy_for(second)
    assert engine is not engines.primary
    assert engine.settings.base_url == "http://127.0.0.1:9/"  # type: ignore[attr-defined]
    assert router.policy_for(router.route("green")) is engine  # one client per engine
    asyncio.run(engines.aclose())
    store.engine.dispose()


def test_across_an_in_place_swap_a_running_task_keeps_its_version_and_a_held_one_waits_for_the_new(  # type: ignore[no-untyped-def]
    make_service,
) -> None:
    """The service end to end: a task running on ``sft`` when the swap begins keeps ``sft`` to its
    end; a task submitted while the swap holds new episodes stays pending, then starts on ``nightly``
    once the alias has moved and the hold is gone."""
    import time

    from agent.store import make_engine
    from tests.serve.conftest import ScriptedPolicy

    service = make_service(ScriptedPolicy(delay_s=0.2))
    admin, agent = service.client(service.admin), service.client(service.agent)
    for name in ("sft", "nightly"):
        body = {"name": name, "served_name": "policy", "base": f"/m/{name}", "kind": "base"}
        assert admin.post("/v1/models", json=body).status_code == 201
    assert admin.post("/v1/models/promote", json={"version": "sft"}).status_code == 200
    engine = make_engine(service.settings.store.url)
    registry, jobs = ModelRegistry(engine), JobStore(engine)

    def task(goal: str) -> str:
        reply = agent.post("/v1/tasks", json={"goal": goal})
        assert reply.status_code == 202, reply.text
        return str(reply.json()["id"])

    def status(task_id: str) -> dict:  # type: ignore[type-arg]
        return dict(agent.get(f"/v1/tasks/{task_id}").json())

    def wait(task_id: str, done: tuple[str, ...]) -> dict:  # type: ignore[type-arg]
        deadline = time.monotonic() + 120
        while (s := status(task_id))["status"] not in done and time.monotonic() < deadline:
            time.sleep(0.05)
        return s

    running = task("Turn on Wi-Fi #steps=40")
    assert wait(running, ("running",))["status"] == "running"
    # The swap: new episodes held, the engine reloaded with nightly, the default alias not yet moved.
    jobs.acquire(HOLD_LOCK, "hold-1", ttl_s=600)
    registry.set_alias(LOADED_ALIAS_PREFIX + "policy", "nightly", actor="swap")
    held = task("Turn on Bluetooth #steps=2")  # admitted (202), not refused
    time.sleep(3)  # the runner's scheduling passes (every second) see the hold
    assert status(held)["status"] == "pending"
    registry.promote("nightly", actor="swap")
    jobs.release(HOLD_LOCK, "hold-1")
    after = wait(held, ("succeeded", "failed", "error"))
    assert after["status"] == "succeeded", after
    assert after["model_version"] == "nightly"
    agent.post(f"/v1/tasks/{running}/cancel")
    before = wait(running, ("succeeded", "failed", "error", "cancelled"))
    assert before["model_version"] == "sft"
    trajectory = agent.get(f"/v1/trajectories/{running}").json()
    assert {s["model_version"] for s in trajectory["steps"]} == {"sft"}
    engine.dispose()


def _sft_promoted(tmp_path, name: str, **version: str):  # type: ignore[no-untyped-def]
    """A SQLite store whose registry serves ``sft`` and holds ``name`` (its parent) to swap to."""
    from agent.store import TrajectoryStore

    store = TrajectoryStore(f"sqlite:///{tmp_path / 'swap.db'}", tmp_path / "shots")
    store.migrate()
    registry = ModelRegistry(store.engine)
    registry.register("sft", served_name="policy", base="/m/sft", kind="base")
    registry.register(name, parent="sft", **version)  # type: ignore[arg-type]
    registry.promote("sft", actor="test")
    return store, registry


def test_a_promote_does_not_wait_behind_the_threads_serving_requests(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Under load the event loop's shared thread pool is busy with the requests being served; a
    swap's database calls run on threads of their own, so a promote is not queued behind them."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from serve.models.swap import SwapController

    class AliasOnly(SwapController):
        async def _serve(self, version, current, *, rollback=False):  # type: ignore[no-untyped-def]
            return "alias", {"ok": True}

    store, registry = _sft_promoted(tmp_path, "nightly", served_name="policy", base="/m/nightly", kind="base")
    controller = AliasOnly(store, registry, PromptSettings())
    busy = threading.Event()

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        # A request holding the pool's only thread until the promote is done (or 120 s pass).
        serving = asyncio.create_task(asyncio.to_thread(busy.wait, 120.0))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        await controller.promote("nightly", actor="test")
        took = time.monotonic() - start
        still_serving = not serving.done()
        busy.set()
        await serving
        await controller.aclose()
        return still_serving, took

    still_serving, took = asyncio.run(scenario())
    assert registry.promoted().name == "nightly"  # type: ignore[union-attr]
    assert still_serving, f"the promote waited {took:.1f} s, until the request thread was free"
    store.engine.dispose()


@pytest.mark.parametrize("held", [True, False])
def test_a_rollback_to_a_version_the_engine_still_holds_is_the_alias_flip_alone(tmp_path, held: bool) -> None:  # type: ignore[no-untyped-def]
    """The version rolled back to passed its canary when it served; if the engine still holds it the
    rollback asks the engine nothing more, else it is loaded and canaried again."""
    from serve.models.swap import SwapController

    served: list[str] = []

    class Engine(SwapController):
        async def _serve(self, version, current, *, rollback=False):  # type: ignore[no-untyped-def]
            served.append(version.name)
            return "alias", {"ok": True}

        async def _still_loaded(self, version):  # type: ignore[no-untyped-def]
            return held

    store, registry = _sft_promoted(tmp_path, "lora", base="/m/sft", adapter="/m/lora", kind="adapter")
    controller = Engine(store, registry, PromptSettings())

    async def scenario() -> str:
        await controller.promote("lora", actor="test")
        result = await controller.rollback(actor="test")
        await controller.aclose()
        return result.path

    path = asyncio.run(scenario())
    assert registry.promoted().name == "sft"  # type: ignore[union-attr]
    assert served == (["lora"] if held else ["lora", "sft"])
    assert path == ("held" if held else "alias")
    store.engine.dispose()


def test_a_version_the_engine_replaced_in_place_is_not_still_held_though_its_name_is_served(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """After an in-place swap the engine serves the same name with other weights: a rollback to the
    version before must reload them, not take the served name for the version."""
    from agent.vllm_policy import VllmSettings
    from serve.models.swap import LOADED_ALIAS_PREFIX, VllmSwapController

    store, registry = _sft_promoted(tmp_path, "merged", served_name="policy", base="/m/merged", kind="full")
    registry.set_alias(LOADED_ALIAS_PREFIX + "policy", "merged", actor="test")  # the engine holds merged

    class Admin:  # the engine lists the served name, whatever weights are behind it
        def served_models(self) -> list[str]:
            return ["policy"]

        def healthy(self) -> bool:
            return True

        def close(self) -> None:
            pass

    controller = VllmSwapController(store, registry, VllmSettings(), PromptSettings())
    controller._admin = lambda url: Admin()  # type: ignore[assignment, method-assign, return-value]

    async def scenario() -> tuple[bool, bool]:
        held = (
            await controller._still_held(registry.get("sft")),
            await controller._still_held(registry.get("merged")),
        )
        await controller.aclose()
        return held

    assert asyncio.run(scenario()) == (False, True)
    store.engine.dispose()


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ('<think>\nopen it\n</think>\n<action>\n{"action": "open", "text": "Settings"}\n</action>', True),
        ("<think>\nopen it\n</think>\n<action>\nnot json\n</action>", False),
        ('<think>\nopen it\n</think>\n<action>\n{"action": "fly", "to": "Settings"}\n</action>', False),
        ("<think>\nopen it\n</think>", False),
    ],
)
def test_the_canary_passes_only_an_answer_whose_action_parses(answer: str, ok: bool) -> None:
    """An action block that is there but is not JSON, or names no action of the space, fails the
    canary as surely as a missing one."""
    from agent.policy import PolicyResult
    from agent.registry import ModelVersion
    from serve.models.swap import canary

    async def ask(turns, sampling):  # type: ignore[no-untyped-def]
        return PolicyResult.from_text(answer, model_version="v")

    from datetime import UTC, datetime

    version = ModelVersion("v", "policy", "/m/v", None, "candidate", datetime.now(UTC), {})
    record = asyncio.run(canary.check(version, ask, "Open the Settings app", 64, PromptSettings()))
    assert record["ok"] is ok, record
    assert ("does not parse" in record.get("why", "")) is (not ok)
