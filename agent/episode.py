"""The episode loop: goal + device + policy -> a recorded trajectory.

Each step: screenshot, prompt with the policy's own history (METHOD.md §1), predict, parse, map
coordinates to device pixels, let a reviewer approve or replace the action (human takeover),
record the step durably, act. The loop stops on ``terminate``, on ``answer`` (recorded as the
episode's answer), at the step budget, at the wall-clock deadline or on cancellation. A parse
error is recorded and retried up to ``max_parse_errors`` times; device errors and policy outages
end the episode with status ``error`` and the reason, keeping every step already recorded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agent.actions import Action, Answer, Terminate, TerminateStatus
from agent.execution import from_device_action, perform, to_device_action
from agent.geometry import Size
from agent.parsing import format_response
from agent.policy import Policy, PolicyError, PolicyResult, SamplingSettings
from agent.prompt import ImagePart, PromptSettings, Screenshot, build_conversation, prepare_image
from agent.secrets import focus_of, redact, typed_text
from agent.store import TrajectoryStore
from agent.trajectory import (
    ActionLabel,
    DeviceRef,
    Episode,
    EpisodeStatus,
    ImageSize,
    ScreenshotRef,
    Step,
    StepSource,
    StepTimings,
    utcnow,
)
from devices.base import Device, DeviceError, ScreenCapture

log = logging.getLogger(__name__)


class EpisodeSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_steps: int = Field(30, gt=0, description="Step budget of an episode")
    timeout_s: float = Field(900.0, gt=0, description="Deadline of an episode")
    max_parse_errors: int = Field(2, ge=0, description="Retries of a step whose response did not parse")
    settle_s: float = Field(0.5, ge=0, description="Wait after an action for the screen to settle")
    model: str | None = Field(None, description="Served model or adapter name; unset: the policy's default")
    # The registry version the episode is pinned to, recorded on it and on every step. Versions
    # swapped into an engine in place share its served name, so the name vLLM echoes cannot tell
    # them apart; the swap drains an engine's episodes first, so the pin is what ran.
    version: str | None = Field(None, description="Registry version to pin (set per task by the service)")
    sampling: SamplingSettings = SamplingSettings()
    mask_secrets: bool = Field(
        True,
        description="Ask the phone before typing; text typed into a password field (or where the phone "
        "cannot tell) is recorded masked (agent.secrets)",
    )


class Verdict(StrEnum):
    APPROVE = "approve"
    REPLACE = "replace"
    ABORT = "abort"


@dataclass(frozen=True)
class Review:
    verdict: Verdict = Verdict.APPROVE
    action: Action | None = None  # the replacement, in device pixels (what a person taps)
    note: dict[str, Any] | None = None  # recorded with the step (``extra["review"]``), e.g. an approval


class StepReviewer(Protocol):
    """Sees each proposed action before it runs: approve it, replace it (takeover) or abort."""

    async def review(self, episode: Episode, step: Step) -> Review: ...


@dataclass
class EpisodeRunner:
    policy: Policy
    device: Device
    store: TrajectoryStore
    settings: EpisodeSettings = field(default_factory=EpisodeSettings)
    prompt: PromptSettings = field(default_factory=PromptSettings)
    reviewer: StepReviewer | None = None
    on_step: Callable[[Episode, Step], Awaitable[None] | None] | None = None
    _current: Episode | None = None  # the episode as last recorded, for timeouts and cancellation

    def _observe(self, capture: ScreenCapture) -> tuple[ScreenshotRef, ImagePart]:
        """Store the screenshot and resize it for the prompt (CPU and disk work, run in a thread)."""
        ref = self.store.screenshots.put(capture.png, capture.width, capture.height)
        encoded = Screenshot(capture.png, Size(capture.width, capture.height))
        source = (
            capture.image
            if capture.image is not None and self.prompt.image_transport == "resized"
            else encoded
        )
        return ref, prepare_image(source, self.prompt)

    async def _save(self, episode: Episode, step: Step | None = None) -> None:
        if step is not None:
            await asyncio.to_thread(self.store.save_step, episode.id, step)
        else:
            await asyncio.to_thread(self.store.save_episode, episode)

    async def _record(self, episode: Episode, step: Step) -> Episode:
        """The step saved in its final form, added to the episode, and announced."""
        await self._save(episode, step)
        episode = episode.model_copy(update={"steps": [*episode.steps, step]})
        self._current = episode
        await self._notify(episode, step)
        return episode

    async def _notify(self, episode: Episode, step: Step) -> None:
        if self.on_step is not None:
            result = self.on_step(episode, step)
            if result is not None:
                await result

    async def run(
        self,
        goal: str,
        *,
        episode_id: str | None = None,
        episode: Episode | None = None,
        cancel: asyncio.Event | None = None,
    ) -> Episode:
        """Run one episode. ``episode`` continues a record made earlier (a queued task)."""
        info = None
        try:
            info = await self.device.info()
        except DeviceError as exc:
            log.warning("device info unavailable: %s", exc)
        device = DeviceRef(serial=self.device.serial, model=info.model if info else None)
        version = self.settings.version or self.settings.model or self.policy.model_version
        if episode is not None:
            episode = episode.model_copy(
                update={
                    "goal": goal,
                    "device": device,
                    "model_version": version,
                    "status": EpisodeStatus.RUNNING,
                    "started_at": utcnow(),
                }
            )
        else:
            episode = Episode(
                **({"id": episode_id} if episode_id else {}),
                goal=goal,
                device=device,
                model_version=version,
                status=EpisodeStatus.RUNNING,
                started_at=utcnow(),
            )
        await self._save(episode)
        self._current = episode
        try:
            # The loop checks its deadline between steps; this bounds a step that hangs.
            episode = await asyncio.wait_for(self._loop(episode, cancel), self.settings.timeout_s + 5)
        except TimeoutError:
            episode = self._finish(self._current or episode, EpisodeStatus.FAILED, "wall-clock timeout")
        except asyncio.CancelledError:
            await self._save(self._finish(self._current or episode, EpisodeStatus.CANCELLED, "cancelled"))
            raise
        await self._save(episode)
        return episode

    @staticmethod
    def _finish(episode: Episode, status: EpisodeStatus, reason: str | None = None) -> Episode:
        return episode.model_copy(update={"status": status, "finished_at": utcnow(), "error": reason})

    async def _loop(self, episode: Episode, cancel: asyncio.Event | None) -> Episode:
        """Steps until the episode ends; each ending is a ``_Stop`` with the finished episode."""
        # Only the last image_limit screens are ever shown again: older ones are dropped, so that
        # an episode's memory does not grow with its length.
        screens: list[ImagePart | None] = []
        history: list[str] = []
        parse_errors = 0
        index = 0
        deadline = time.monotonic() + self.settings.timeout_s
        try:
            while index < self.settings.max_steps:
                if cancel is not None and cancel.is_set():
                    raise _Stop(self._finish(episode, EpisodeStatus.CANCELLED, "cancelled"))
                if time.monotonic() > deadline:
                    raise _Stop(self._finish(episode, EpisodeStatus.FAILED, "wall-clock timeout"))
                proposal = await self._guard(await self._propose(episode, index, screens, history))
                step, device_action = await self._review(episode, proposal)
                index += 1
                if device_action is None:
                    parse_errors += 1
                    episode = await self._record(episode, step.model_copy(update={"ended_at": utcnow()}))
                    if parse_errors > self.settings.max_parse_errors:
                        error = proposal.result.parsed.error
                        reason = f"unparseable response ({error.reason if error else '?'})"
                        raise _Stop(self._finish(episode, EpisodeStatus.FAILED, reason))
                    continue  # the same screen again; the bad response stays out of the history
                if "secret" in step.extra and (secret := typed_text(device_action)):
                    # Responses that did not parse on this screen may quote the text too.
                    episode = await self._mask_retries(episode, secret)
                action = (
                    proposal.result.parsed.action
                    if step.source is StepSource.POLICY and proposal.result.parsed.action is not None
                    else from_device_action(device_action, proposal.part.geometry)
                )
                episode = await self._act(episode, step, device_action, proposal)
                screens.append(proposal.part)
                if (old := len(screens) - self.prompt.image_limit) >= 0:
                    screens[old] = None  # the next prompt adds its own screen: this one is out of view
                # The history holds the step as recorded: a secret typed stays masked there too.
                history.append(
                    step.raw_response or ""
                    if step.source is StepSource.POLICY
                    else format_response(
                        from_device_action(step.device_action or device_action, proposal.part.geometry)
                    )
                )
                self._stop_if_done(episode, action)
        except _Stop as stop:
            return stop.episode
        return self._finish(
            episode, EpisodeStatus.FAILED, f"step budget of {self.settings.max_steps} used up"
        )

    async def _propose(
        self, episode: Episode, index: int, screens: list[ImagePart | None], history: list[str]
    ) -> _Proposal:
        """Screenshot, prompt, prediction: the step as the policy proposes it (not yet recorded)."""
        started = utcnow()
        t0 = time.perf_counter()
        try:
            capture = await self.device.screenshot()
        except DeviceError as exc:
            raise _Stop(self._finish(episode, EpisodeStatus.ERROR, f"device error: {exc}")) from None
        device_s = time.perf_counter() - t0  # the phone's time; what follows is the service's
        ref, part = await asyncio.to_thread(self._observe, capture)
        turns = build_conversation(episode.goal, [*screens, part], history, self.prompt)
        try:
            result = await self.policy.predict(
                turns, sampling=self.settings.sampling, model=self.settings.model
            )
        except PolicyError as exc:
            raise _Stop(self._finish(episode, EpisodeStatus.ERROR, f"policy error: {exc}")) from None
        geometry = part.geometry
        action = result.parsed.action
        step = Step(
            index=index,
            screenshot=ref,
            resized=ImageSize(width=geometry.resized.width, height=geometry.resized.height),
            raw_response=result.raw,
            action=action,
            parse_error=result.parsed.error,
            model_version=self.settings.version or result.model_version,
            timings=StepTimings(policy_s=result.latency_s, device_s=device_s),
            started_at=started,
            device_action=to_device_action(action, geometry) if action else None,
            # An all-black frame (screen off, or an app that forbids capture): never training data.
            extra={"black_frame": capture.note or "black"} if capture.black else {},
        )
        return _Proposal(step, result, part, device_s)

    async def _mask_retries(self, episode: Episode, secret: str) -> Episode:
        """The episode with ``secret`` masked in the unparsed responses recorded since its last
        executed step (the same screen asked again), saved again where they held it."""
        steps = list(episode.steps)
        for i in range(len(steps) - 1, -1, -1):
            if steps[i].parse_error is None:
                break
            # redact's record of the secret is dropped: this step typed nothing.
            masked = redact(steps[i], secret, focus="").model_copy(update={"extra": steps[i].extra})
            if masked.raw_response != steps[i].raw_response:
                steps[i] = masked
                await self._save(episode, steps[i])
        return episode.model_copy(update={"steps": steps})

    async def _guard(self, proposal: _Proposal) -> _Proposal:
        """The proposal with the text it types masked in its step when the focused field is a
        password (or the phone cannot tell): the reviewer, the events and the store see only that."""
        secret = typed_text(proposal.step.device_action)
        if not self.settings.mask_secrets or secret is None:
            return proposal
        focus = await focus_of(self.device)
        # What the phone said goes with the step: the reviewer decides on this one answer.
        step = proposal.step.model_copy(update={"extra": {**proposal.step.extra, "focus": focus}})
        if focus == "other":
            return replace(proposal, step=step, focus=focus)
        return replace(
            proposal, step=redact(step, secret, focus=focus), focus=focus, typed=proposal.step.device_action
        )

    async def _review(self, episode: Episode, proposal: _Proposal) -> tuple[Step, Action | None]:
        """The reviewer's decision applied: the step to record and the device action to perform.
        A reviewer (a person holding the task) sees every step, and may supply the action where
        the policy's response could not be parsed."""
        step = proposal.step
        review = await self.reviewer.review(episode, step) if self.reviewer is not None else Review()
        if review.note:
            step = step.model_copy(update={"extra": {**step.extra, "review": review.note}})
        if review.verdict is Verdict.ABORT:
            await self._save(
                episode, step.model_copy(update={"ended_at": utcnow(), "error": "aborted by reviewer"})
            )
            raise _Stop(self._finish(episode, EpisodeStatus.CANCELLED, "aborted by reviewer"))
        if review.verdict is Verdict.REPLACE and review.action is not None:
            replaced = review.action
            update: dict[str, Any] = {
                "source": StepSource.HUMAN,
                "device_action": replaced,
                "expert": ActionLabel.from_action(replaced),
            }
            if typed_text(replaced) is None and "secret" in step.extra:
                # The person's action types nothing: a step to learn from (its raw response, the
                # policy's proposal, stays masked).
                update["extra"] = {k: v for k, v in step.extra.items() if k != "secret"}
            step = step.model_copy(update=update)
            if self.settings.mask_secrets and (secret := typed_text(replaced)) is not None:
                # What a person types is kept as the policy's would be; the phone is asked again
                # unless the policy's own proposal already typed on this screen.
                focus = proposal.focus or await focus_of(self.device)
                if focus != "other":
                    step = redact(step, secret, focus=focus)
            return step, replaced
        return step, proposal.typed or step.device_action

    async def _act(self, episode: Episode, step: Step, device_action: Action, proposal: _Proposal) -> Episode:
        """Save the step, perform its action, record the outcome; a device error ends the episode."""
        await self._save(episode, step)  # durable before the action reaches the phone
        t1 = time.perf_counter()
        error = None
        try:
            await perform(self.device, device_action)
            if not isinstance(device_action, Answer | Terminate) and self.settings.settle_s:
                await asyncio.sleep(self.settings.settle_s)
        except DeviceError as exc:
            error = f"device error: {exc}"
            if "secret" in step.extra:  # a failed `input text` quotes the command, and with it the text
                error = f"device error while typing a secret ({type(exc).__name__}; its message is not kept)"
        device_s = proposal.device_s + time.perf_counter() - t1
        timings = StepTimings(policy_s=proposal.result.latency_s, device_s=device_s)
        episode = await self._record(
            episode, step.model_copy(update={"ended_at": utcnow(), "error": error, "timings": timings})
        )
        if error is not None:
            raise _Stop(self._finish(episode, EpisodeStatus.ERROR, error))
        return episode

    def _stop_if_done(self, episode: Episode, action: Action) -> None:
        if isinstance(action, Terminate):
            ok = action.status is TerminateStatus.SUCCESS
            status = EpisodeStatus.SUCCEEDED if ok else EpisodeStatus.FAILED
            raise _Stop(self._finish(episode, status, None if ok else "the policy gave up"))
        if isinstance(action, Answer):
            answered = episode.model_copy(update={"answer": action.text})
            raise _Stop(self._finish(answered, EpisodeStatus.SUCCEEDED))


@dataclass(frozen=True)
class _Proposal:
    step: Step  # as the policy proposed it, its action mapped to device pixels
    result: PolicyResult
    part: ImagePart  # the screen as the prompt showed it (kept for the next prompts)
    device_s: float  # the screenshot's time
    focus: str | None = None  # what the phone said of its focused field, when the step types
    typed: Action | None = None  # the unmasked action, when the step's record masks what it types


class _Stop(Exception):
    """Ends the loop with the finished episode."""

    def __init__(self, episode: Episode) -> None:
        super().__init__(episode.status)
        self.episode = episode
