"""Hot swaps into the in-process policy (``LocalModels`` + ``LocalSwapController``): the CPU-only
deployment's and the demo's path, with the same canary, rollback and pinning as vLLM's."""

from __future__ import annotations

import base64
import io
import shutil
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.training import RESIZE

pytestmark = pytest.mark.timeout(900)


def _screenshot() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (1080, 2400), "white").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _retrained(checkpoint: Path, tmp_path: Path) -> Path:
    """``checkpoint`` trained further on other tasks (turning things off): a full checkpoint whose
    greedy answers differ from its parent's."""
    from tests.training import SIM_DATA, train_sft

    data = {**SIM_DATA, "sources": [{"kind": "sim", "tasks": ["wifi_off", "bluetooth_off"], "seeds": [0]}]}
    return train_sft(checkpoint, tmp_path, data, 20)


PROBE = {"goal": "Turn on Wi-Fi", "sampling": {"temperature": 0.0, "max_tokens": 48}}


def _greedy(service) -> str:  # type: ignore[no-untyped-def]
    """The served default version's greedy answer to the probe."""
    with service.client(service.agent) as client:
        reply = client.post("/v1/predict", json={**PROBE, "screenshots": [_screenshot()]})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["raw"])


def _greedy_in_process(checkpoint: Path, prompt) -> str:  # type: ignore[no-untyped-def]
    """The same probe answered by the checkpoint loaded here, outside the service."""
    import asyncio

    from agent.geometry import Size
    from agent.local_policy import LocalPolicy
    from agent.policy import SamplingSettings
    from agent.prompt import Screenshot, build_conversation

    shot = Screenshot(base64.b64decode(_screenshot()), Size(1080, 2400))
    turns = build_conversation(str(PROBE["goal"]), [shot], [], prompt)
    policy = LocalPolicy(checkpoint, prompt=prompt)
    sampling = SamplingSettings(**PROBE["sampling"])  # type: ignore[arg-type]
    return asyncio.run(policy.predict(turns, sampling=sampling)).raw


def test_versions_are_hot_swapped_into_the_in_process_policy_without_a_failed_request(
    make_service,  # type: ignore[no-untyped-def]
    sft_checkpoint: Path,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalModels, LocalPolicy
    from agent.prompt import PromptSettings
    from serve.models.swap import SwapSettings

    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    engine = LocalModels(LocalPolicy(sft_checkpoint, prompt=prompt))
    starter = engine.model_version
    service = make_service(
        engine, resize=prompt.resize, swap=SwapSettings(retire_after_s=2, canary_max_tokens=64)
    )  # type: ignore[arg-type]
    admin = service.client(service.admin)
    newer = _retrained(sft_checkpoint, tmp_path)  # other weights: its greedy answers differ
    for body in (
        {"name": "starter", "served_name": starter, "base": str(sft_checkpoint), "kind": "base"},
        {"name": "newer", "base": str(newer), "kind": "full", "parent": "starter"},
        {"name": "broken", "base": str(tiny_model_dir), "kind": "full"},  # random weights: no action parses
    ):
        assert admin.post("/v1/models", json=body).status_code == 201
    assert admin.post("/v1/models/promote", json={"version": "starter"}).status_code == 200
    assert engine.served_models() == [starter]  # the engine already held it: canaried, nothing loaded
    starter_says = _greedy(service)
    newer_says = _greedy_in_process(newer, prompt)
    assert newer_says != starter_says  # else the test could not tell the weights apart

    # Requests keep coming while versions are loaded, canaried, promoted, retired and rolled back.
    answers: list[tuple[int, str]] = []
    stop = threading.Event()

    def ask() -> None:
        with service.client(service.agent) as client:
            while not stop.is_set():
                reply = client.post(
                    "/v1/predict",
                    json={
                        "goal": "Turn on Wi-Fi",
                        "screenshots": [_screenshot()],
                        "sampling": {"max_tokens": 16},
                    },
                )
                try:  # a plain-text 5xx is recorded as a failed request, not lost with the thread
                    answers.append((reply.status_code, reply.json().get("model_version", reply.text)))
                except ValueError:
                    answers.append((reply.status_code, reply.text))

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        promoted = admin.post("/v1/models/promote", json={"version": "newer"})
        assert promoted.status_code == 200, promoted.text
        assert promoted.json()["default"] == "newer"
        assert engine.model_version == "newer"
        assert _greedy(service) == newer_says  # the newer weights answer, not the old ones relabelled
        history = admin.get("/v1/models/newer").json()["events"]
        assert [e["detail"].get("path") for e in history if e["event"] == "promoted"] == ["local"]

        # The old version is unloaded once no episode uses it, after a grace for requests that chose
        # it just before the flip (2 s here, 30 s by default).
        deadline = time.monotonic() + 30
        while starter in engine.served_models() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert engine.served_models() == ["newer"]

        # A version whose canary fails is rejected, unloaded, and the default keeps serving.
        failed = admin.post("/v1/models/promote", json={"version": "broken"})
        assert failed.status_code == 409
        assert "canary" in failed.json()["detail"]
        assert admin.get("/v1/models/broken").json()["state"] == "rejected"
        assert engine.served_models() == ["newer"]
        assert admin.get("/v1/models").json()["default"] == "newer"

        # Rollback loads the previous version again, canaries it and makes it the default.
        rolled = admin.post("/v1/models/rollback", json={})
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["default"] == "starter"
        assert engine.model_version == starter
        assert _greedy(service) == starter_says
        time.sleep(1.0)  # a few requests after the rollback too
    finally:
        stop.set()
        asker.join(60)
    assert answers, "no request ran during the swaps"
    assert [a for a in answers if a[0] != 200] == []  # not one request failed
    served = [version for _, version in answers]
    assert "newer" in served
    assert served[-1] == "starter"  # after the rollback the starter answers again (by its version name)

    # A request pinned to a version the engine does not hold is refused, not served by another.
    pinned = admin.post(
        "/v1/predict",
        json={"goal": "g", "screenshots": [_screenshot()], "model": "broken", "sampling": {"max_tokens": 8}},
    )
    assert pinned.status_code == 400, pinned.text  # the client's name, as vLLM's 404 for an unknown model
    assert "no version is served as 'broken'" in pinned.json()["detail"]


def test_a_staged_version_is_promoted_by_the_alias_flip_alone(  # type: ignore[no-untyped-def]
    make_service, sft_checkpoint: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Staging loads and canaries a version beside the one serving; its promotion then asks the
    engine nothing (no load, no canary). One that fails its canary is rejected when staged."""
    from agent.geometry import ResizeSettings
    from agent.local_policy import LocalModels, LocalPolicy
    from agent.prompt import PromptSettings
    from serve.models.swap import SwapSettings

    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    engine = LocalModels(LocalPolicy(sft_checkpoint, prompt=prompt))
    service = make_service(engine, resize=prompt.resize, swap=SwapSettings(canary_max_tokens=64))  # type: ignore[arg-type]
    admin = service.client(service.admin)
    newer = tmp_path / "newer"
    shutil.copytree(sft_checkpoint, newer)
    for body in (
        {"name": "starter", "served_name": engine.model_version, "base": str(sft_checkpoint), "kind": "base"},
        {"name": "newer", "base": str(newer), "kind": "full", "parent": "starter"},
        {"name": "broken", "base": str(tiny_model_dir), "kind": "full"},
    ):
        assert admin.post("/v1/models", json=body).status_code == 201
    assert admin.post("/v1/models/promote", json={"version": "starter"}).status_code == 200

    staged = admin.post("/v1/models/stage", json={"version": "newer"})
    assert staged.status_code == 200, staged.text
    assert staged.json()["default"] == "starter"  # not promoted: the alias did not move
    assert "newer" in engine.served_models()
    assert admin.get("/v1/models/newer").json()["info"]["staged"]["canary"]["ok"] is True

    asked: list[str | None] = []
    real_predict = engine.predict

    async def predict(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("model"))
        return await real_predict(*args, **kwargs)

    engine.predict = predict  # type: ignore[method-assign]
    promoted = admin.post("/v1/models/promote", json={"version": "newer"})
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["default"] == "newer"
    assert asked == []  # no canary: the stage's stands
    history = admin.get("/v1/models/newer").json()["events"]
    assert [e["detail"].get("path") for e in history if e["event"] == "promoted"] == ["staged"]

    refused = admin.post("/v1/models/stage", json={"version": "broken"})
    assert refused.status_code == 409
    assert "canary" in refused.json()["detail"]
    assert admin.get("/v1/models/broken").json()["state"] == "rejected"
    assert admin.get("/v1/models").json()["default"] == "newer"
