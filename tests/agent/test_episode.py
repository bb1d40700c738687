"""The episode loop on a simulated phone behind the real adb server, recording into real databases."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agent.actions import Click, Type
from agent.devkit.expert_policy import ExpertPolicy
from agent.episode import EpisodeRunner, EpisodeSettings, Review, Verdict
from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import Turn
from agent.store import TrajectoryStore
from agent.trajectory import EpisodeStatus, Step, StepSource
from agent.vllm_policy import VllmPolicy, VllmSettings
from devices.adb import AdbDriver, DriverSettings
from devices.base import DeviceError
from devices.sim.fleet import SimDevice, SimFleet
from devices.sim.tasks import TASKS, Outcome

pytestmark = pytest.mark.timeout(120)
FAST = EpisodeSettings(settle_s=0.0, max_steps=25)


def _driver(fleet, sim):  # type: ignore[no-untyped-def]
    return AdbDriver(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))


@pytest.mark.parametrize("task_name", ["wifi_on", "reply_to_message", "phone_number_question"])
def test_an_episode_solves_the_task_and_records_every_step(store, fleet, sim, task_name: str) -> None:  # type: ignore[no-untyped-def]
    task = TASKS[task_name].create(0)
    task.initialize(sim.phone)
    runner = EpisodeRunner(ExpertPolicy(task, sim.phone), _driver(fleet, sim), store, FAST)
    episode = asyncio.run(runner.run(task.goal))
    assert episode.status is EpisodeStatus.SUCCEEDED, episode.error
    assert task.is_successful(sim.phone, Outcome(answer=episode.answer))
    stored = store.get(episode.id)
    assert stored == episode
    assert stored.device is not None
    assert stored.device.serial == sim.serial
    assert stored.device.model == "Pixel 8"
    for step in stored.steps:
        assert step.raw_response is not None
        assert step.action is not None
        assert step.device_action is not None
        assert step.model_version == "expert"
        assert step.timings.device_s is not None
        assert store.screenshots.path(step.screenshot.sha256 or "").is_file()
        assert step.resized is not None
        assert (step.resized.width, step.resized.height) == (1092, 2408)
    if task.question:
        assert episode.answer


class Garbage:
    """A policy that always answers something unparseable (as a broken fine-tune would)."""

    model_version = "garbage"

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        return PolicyResult.from_text("I would tap the Wi-Fi switch.", model_version="garbage")

    async def aclose(self) -> None:
        return None


def test_unparseable_responses_are_recorded_then_fail_the_episode(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    runner = EpisodeRunner(
        Garbage(), _driver(fleet, sim), store, EpisodeSettings(settle_s=0, max_parse_errors=2)
    )
    episode = asyncio.run(runner.run("Turn on Wi-Fi"))
    assert episode.status is EpisodeStatus.FAILED
    assert episode.error == "unparseable response (no_action_tag)"
    stored = store.get(episode.id)
    assert len(stored.steps) == 3
    assert all(s.parse_error is not None and s.action is None for s in stored.steps)
    assert all(s.raw_response == "I would tap the Wi-Fi switch." for s in stored.steps)


def test_the_tiny_model_runs_an_episode_through_the_local_backend(store, fleet, sim, tiny_model_dir) -> None:  # type: ignore[no-untyped-def]
    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalPolicy
    from agent.prompt import PromptSettings

    prompt = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))
    policy = LocalPolicy(tiny_model_dir, prompt=prompt, sampling=SamplingSettings(max_tokens=16))
    runner = EpisodeRunner(
        policy, _driver(fleet, sim), store, EpisodeSettings(settle_s=0, max_parse_errors=1), prompt=prompt
    )
    episode = asyncio.run(runner.run("Turn on Wi-Fi"))
    # A random model writes no valid action: each step is kept, with its raw text and the reason.
    assert episode.status is EpisodeStatus.FAILED
    assert len(store.get(episode.id).steps) == 2
    assert all(s.model_version == tiny_model_dir.name and s.raw_response for s in episode.steps)


def test_a_person_can_take_over_a_step(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    from devices.sim.ui import find

    task = TASKS["open_app"].create(0)
    task.initialize(sim.phone)
    icon = find(sim.phone.view(), desc="Settings")
    assert icon is not None

    class TakeOver:
        def __init__(self) -> None:
            self.seen = 0

        async def review(self, episode, step):  # type: ignore[no-untyped-def]
            self.seen += 1
            if step.index == 0:
                return Review(Verdict.REPLACE, Click(coordinate=icon.center))
            return Review()

    runner = EpisodeRunner(
        ExpertPolicy(task, sim.phone), _driver(fleet, sim), store, FAST, reviewer=TakeOver()
    )
    episode = asyncio.run(runner.run(task.goal))
    first = store.get(episode.id).steps[0]
    assert first.source is StepSource.HUMAN
    assert first.device_action == Click(coordinate=icon.center)
    assert first.expert is not None
    assert first.expert.coordinate == icon.center
    assert sim.phone.foreground.package == "com.android.settings"


def test_a_person_can_supply_the_action_of_a_step_the_policy_could_not_answer(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    from devices.sim.ui import find

    task = TASKS["open_app"].create(0)
    task.initialize(sim.phone)
    icon = find(sim.phone.view(), desc="Settings")
    assert icon is not None

    class Garbled:
        model_version = "garbled"

        async def predict(self, turns, *, sampling=None, model=None):  # type: ignore[no-untyped-def]
            return PolicyResult.from_text(
                "no action here", model_version="garbled", prompt_tokens=0, completion_tokens=0
            )

        async def aclose(self) -> None:
            return None

    class Person:
        async def review(self, episode, step):  # type: ignore[no-untyped-def]
            assert step.device_action is None  # nothing was proposed
            if step.index == 0:
                return Review(Verdict.REPLACE, Click(coordinate=icon.center))
            return Review()

    runner = EpisodeRunner(
        Garbled(),
        _driver(fleet, sim),
        store,
        EpisodeSettings(settle_s=0.0, max_steps=5, max_parse_errors=0),
        reviewer=Person(),
    )
    episode = asyncio.run(runner.run(task.goal))
    steps = store.get(episode.id).steps
    assert [s.source for s in steps] == [StepSource.HUMAN, StepSource.POLICY]
    assert steps[0].device_action == Click(coordinate=icon.center)
    assert steps[0].raw_response == "no action here"  # the policy's answer stays on record
    assert steps[1].device_action is None
    assert episode.status is EpisodeStatus.FAILED  # the next unparseable answer ends it
    assert sim.phone.foreground.package == "com.android.settings"


def test_a_vanished_phone_ends_the_episode_with_a_device_error(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    task = TASKS["create_contact"].create(0)
    task.initialize(sim.phone)
    seen: list[int] = []

    def pull_cable(episode, step) -> None:  # type: ignore[no-untyped-def]
        seen.append(step.index)
        if step.index == 1:
            sim.phone.faults.gone = True
            sim.adbd.drop_connections()

    driver = _driver(fleet, sim)
    driver.settings.command_timeout = 3
    runner = EpisodeRunner(ExpertPolicy(task, sim.phone), driver, store, FAST, on_step=pull_cable)
    episode = asyncio.run(runner.run(task.goal))
    sim.phone.faults.gone = False
    assert episode.status is EpisodeStatus.ERROR
    assert episode.error is not None
    assert episode.error.startswith("device error")
    assert len(store.get(episode.id).steps) == 2


def test_a_dead_policy_server_ends_the_episode_with_a_policy_error(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    dead = VllmPolicy(VllmSettings(base_url="http://127.0.0.1:9", max_retries=1, backoff_s=0.01))
    runner = EpisodeRunner(dead, _driver(fleet, sim), store, FAST)
    episode = asyncio.run(runner.run("Turn on Wi-Fi"))
    assert episode.status is EpisodeStatus.ERROR
    assert episode.error is not None
    assert "policy error" in episode.error
    assert "after 2 attempts" in episode.error
    assert store.get(episode.id).status is EpisodeStatus.ERROR


def test_cancellation_is_recorded(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    cancel = asyncio.Event()
    cancel.set()
    runner = EpisodeRunner(Garbage(), _driver(fleet, sim), store, FAST)
    episode = asyncio.run(runner.run("Turn on Wi-Fi", cancel=cancel))
    assert episode.status is EpisodeStatus.CANCELLED
    assert store.get(episode.id).status is EpisodeStatus.CANCELLED


TAP_RAW = (
    '<think>\nThe Wi-Fi switch.\n</think>\n<action>\n{"action": "click", "coordinate": [546, 602]}\n</action>'
)


class Tapper:
    """A policy that always taps the same resized-image point."""

    model_version = "tapper"

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        return PolicyResult.from_text(TAP_RAW, model_version="tapper")

    async def aclose(self) -> None:
        return None


class ProcessDied(RuntimeError):
    """The service dies while the action is on its way (power cut, OOM kill): nothing after it runs."""


class DiesOnTap(AdbDriver):
    """An adb driver that, when the tap arrives, reads what the store already holds, then dies."""

    def __init__(self, fleet: SimFleet, sim: SimDevice, store: TrajectoryStore, episode_id: str) -> None:
        super().__init__(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))
        self.store = store
        self.episode_id = episode_id
        self.tapped: tuple[int, int] | None = None
        self.stored_at_tap: list[Step] = []

    async def tap(self, x: int, y: int) -> None:
        self.tapped = (x, y)
        self.stored_at_tap = self.store.get(self.episode_id).steps
        raise ProcessDied


def test_a_step_is_durable_before_its_action_reaches_the_phone(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    device = DiesOnTap(fleet, sim, store, "pre-action-save")
    runner = EpisodeRunner(Tapper(), device, store, FAST)
    with pytest.raises(ProcessDied):
        asyncio.run(runner.run("Turn on Wi-Fi", episode_id="pre-action-save"))
    assert device.tapped is not None
    # What the store held when the phone got the tap: the step, its parsed and its device action.
    assert [s.index for s in device.stored_at_tap] == [0]
    seen = device.stored_at_tap[0]
    assert seen.raw_response == TAP_RAW
    assert seen.action == Click(coordinate=(546, 602))
    assert seen.device_action == Click(coordinate=device.tapped)
    assert seen.ended_at is None  # saved before acting, not after
    # The process died mid-action: the step is still there for whoever picks the episode up.
    after = store.get("pre-action-save")
    assert after.steps == [seen]
    assert after.status is EpisodeStatus.RUNNING


def test_an_episode_keeps_only_the_screens_its_prompt_can_show(store, fleet, sim, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Memory per running episode is bounded by the prompt's image limit, not by the episode's length."""
    import agent.episode as episode_module

    held: list[int] = []
    real = episode_module.build_conversation

    def counting(goal, screenshots, history, settings=None):  # type: ignore[no-untyped-def]
        held.append(sum(s is not None for s in screenshots))
        return real(goal, screenshots, history, settings)

    monkeypatch.setattr(episode_module, "build_conversation", counting)
    runner = EpisodeRunner(Tapper(), _driver(fleet, sim), store, EpisodeSettings(settle_s=0, max_steps=12))
    episode = asyncio.run(runner.run("Turn on Wi-Fi"))
    assert len(episode.steps) == 12
    assert held == [1, *[2] * 11]  # the prompt's image_limit (2), however long the episode runs
    assert all(s.screenshot for s in store.get(episode.id).steps)  # every screen is still stored


class TypesTwice:
    """Types ``first`` then ``second``, then finishes; keeps what its prompts showed it."""

    model_version = "typist"

    def __init__(self, first: str, second: str) -> None:
        self.texts = [first, second]
        self.seen: list[str] = []

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        self.seen.append(repr(turns))
        index = sum(1 for t in turns if t.role == "assistant")
        if index < 2:
            text = self.texts[index]
            raw = (
                f'<think>\ntype {text}\n</think>\n<action>\n{{"action": "type", "text": "{text}"}}\n</action>'
            )
        else:
            raw = '<think>\ndone\n</think>\n<action>\n{"action": "terminate", "status": "success"}\n</action>'
        return PolicyResult.from_text(raw, model_version=self.model_version)

    async def aclose(self) -> None:
        return None


class BlindAfterOne(AdbDriver):
    """Answers the first hierarchy dump; every later one fails (a phone whose uiautomator died)."""

    dumps = 0

    async def hierarchy(self) -> str:
        self.dumps += 1
        if self.dumps > 1:
            raise DeviceError(self.serial, "uiautomator dump failed")
        return await super().hierarchy()


def test_text_typed_where_the_phone_cannot_say_it_is_not_a_password_is_kept_masked(store, fleet, sim) -> None:  # type: ignore[no-untyped-def]
    from agent.secrets import MASK

    sim.phone.start("com.example.notes")
    policy = TypesTwice("groceries", "pin-8841")
    device = BlindAfterOne(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))
    episode = asyncio.run(EpisodeRunner(policy, device, store, FAST).run("Write it down"))
    assert episode.status is EpisodeStatus.SUCCEEDED, episode.error
    plain, masked = store.get(episode.id).steps[:2]
    assert plain.device_action == Type(text="groceries")
    assert "secret" not in plain.extra
    assert masked.device_action == Type(text=MASK)
    assert masked.extra["secret"]["length"] == len("pin-8841")
    assert masked.extra["secret"]["focus"].startswith("cannot tell (DeviceError")
    assert "pin-8841" not in store.get(episode.id).model_dump_json()
    assert "pin-8841" not in policy.seen[2]  # the next prompt's history holds the masked step
    assert "groceries" in policy.seen[2]


class GarblesThenTypes:
    """Says the secret in a response that does not parse, then types it, then finishes."""

    model_version = "garbler"

    def __init__(self) -> None:
        self.calls = 0

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        self.calls += 1
        if self.calls == 1:
            raw = "I would type pin-8841 into the field"  # no action tag: retried on the same screen
        elif self.calls == 2:
            raw = '<think>\ntype pin-8841\n</think>\n<action>\n{"action": "type", "text": "pin-8841"}\n</action>'
        else:
            raw = '<think>\ndone\n</think>\n<action>\n{"action": "terminate", "status": "success"}\n</action>'
        return PolicyResult.from_text(raw, model_version=self.model_version)

    async def aclose(self) -> None:
        return None


class Blind(AdbDriver):
    async def hierarchy(self) -> str:
        raise DeviceError(self.serial, "uiautomator dump failed")


def test_a_secret_quoted_by_a_response_that_did_not_parse_is_masked_once_it_is_typed(
    store, fleet, sim
) -> None:  # type: ignore[no-untyped-def]
    sim.phone.start("com.example.notes")
    device = Blind(fleet.client(), sim.serial, DriverSettings(use_uiautomator2=False))
    episode = asyncio.run(EpisodeRunner(GarblesThenTypes(), device, store, FAST).run("Log in"))
    assert episode.status is EpisodeStatus.SUCCEEDED, episode.error
    stored = store.get(episode.id)
    assert stored.steps[0].parse_error is not None
    assert "secret" not in stored.steps[0].extra  # it typed nothing
    assert "pin-8841" not in stored.model_dump_json()
    assert episode.steps[0].raw_response == stored.steps[0].raw_response  # the returned record agrees
