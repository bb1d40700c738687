"""The optional judge: unlabelled finished episodes get a verdict stored with the judge's name and
prompt version; an unclear answer or a failed request leaves them unlabelled; curation uses the
verdicts only when told to trust them. The endpoint here is a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from agent.actions import action_from_dict
from agent.trajectory import Episode, EpisodeStatus, Step
from train.curation import CurationSettings, curate
from train.judge import JudgeSettings, judge_episodes, parse_verdict


def test_verdicts_parse_only_when_clear() -> None:
    assert parse_verdict("The switch is on.\nVERDICT: SUCCESS") is True
    assert parse_verdict("verdict: failure") is False
    assert (
        parse_verdict("VERDICT: SUCCESS ... on reflection VERDICT: FAILURE") is False
    )  # the last one counts
    assert parse_verdict("It looks done.") is None
    assert parse_verdict("VERDICT: SUCCESSFUL") is None


def test_the_judge_labels_unlabelled_episodes(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import io

    from PIL import Image

    def png(shade: int) -> bytes:
        buffer = io.BytesIO()
        Image.new("RGB", (108, 240), (shade, shade, shade)).save(buffer, "PNG")
        return buffer.getvalue()

    def episode(goal: str, **fields) -> Episode:  # type: ignore[no-untyped-def]
        steps = [
            Step(
                index=i,
                screenshot=store.screenshots.put(png(40 * i + 1), 108, 240),
                device_action=action_from_dict({"action": "click", "coordinate": [10, 20 + i]}),
            )
            for i in range(3)
        ]
        made = Episode(goal=goal, status=EpisodeStatus.FAILED, steps=steps, **fields)
        store.save_episode(made)
        for step in steps:
            store.save_step(made.id, step)
        return made

    yes, no, unclear, broken = (
        episode("Turn on Wi-Fi"),
        episode("Mute the phone"),
        episode("Call Anna"),
        episode("boom"),
    )
    labelled = episode(
        "Turn off Wi-Fi", is_successful=True, labels={"feedback": "success", "label_source": "client"}
    )
    running = Episode(goal="still going", status=EpisodeStatus.RUNNING)
    store.save_episode(running)
    asked: list[dict] = []  # type: ignore[type-arg]

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body)
        task = body["messages"][1]["content"][0]["text"]
        if "boom" in task:
            return httpx.Response(500, json={"error": "overloaded"})
        text = {"Turn on Wi-Fi": "Wi-Fi shows on.\nVERDICT: SUCCESS", "Mute the phone": "VERDICT: FAILURE"}
        reply = next((v for k, v in text.items() if k in task), "Hard to say.")
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": reply}}]})

    settings = JudgeSettings(enabled=True, model="qwen-judge", screenshots=2, max_retries=0)
    client = httpx.Client(base_url="http://judge", transport=httpx.MockTransport(answer))
    counts = judge_episodes(store, settings, client=client)
    assert counts == {"success": 1, "failure": 1, "unclear": 1, "error": 1}
    assert len(asked) == 4  # the labelled and the running episodes were not asked about
    content = asked[0]["messages"][1]["content"]
    assert "1. " in content[0]["text"] and '"coordinate": [10, 20]' in content[0]["text"]  # noqa: PT018
    assert [c["type"] for c in content[1:]] == ["image_url", "image_url"]  # the last two screenshots
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    got = {e.goal: e for e in (store.get(x.id) for x in (yes, no, unclear, broken, labelled))}
    assert got["Turn on Wi-Fi"].is_successful is True
    judged = {k: v for k, v in got["Turn on Wi-Fi"].labels.items() if k.startswith(("judge", "label"))}
    assert judged == {
        "judge": "qwen-judge",
        "judge_prompt_version": "1",
        "judge_verdict": "success",
        "label_source": "judge",
    }
    assert got["Mute the phone"].is_successful is False
    assert got["Call Anna"].is_successful is None
    assert got["boom"].is_successful is None
    assert got["Turn off Wi-Fi"].labels["label_source"] == "client"

    every = [store.get(x.id) for x in (yes, no, unclear, labelled)]
    ignored = curate(every, tmp_path / "a", CurationSettings(holdout_fraction=0.0))
    assert sorted(e.goal for e in ignored.train) == ["Turn off Wi-Fi"]
    trusted = curate(every, tmp_path / "b", CurationSettings(holdout_fraction=0.0, trust_judge=True))
    assert sorted(e.goal for e in trusted.train) == ["Turn off Wi-Fi", "Turn on Wi-Fi"]


def test_the_judge_retries_what_may_pass_and_waits_as_the_server_asks(store) -> None:  # type: ignore[no-untyped-def]
    import time

    episode = Episode(
        goal="Turn on Wi-Fi",
        status=EpisodeStatus.FAILED,
        steps=[Step(index=0, screenshot=store.screenshots.put(b"not a png", 1, 1))],
    )
    store.save_episode(episode)
    store.save_step(episode.id, episode.steps[0])
    replies = [
        httpx.Response(503, headers={"Retry-After": "0.3"}, json={"error": "loading"}),
        httpx.Response(429, headers={"Retry-After": "0"}, json={"error": "busy"}),
        httpx.Response(200, json={"choices": [{"message": {"content": "VERDICT: SUCCESS"}}]}),
    ]
    times: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        times.append(time.monotonic())
        return replies[len(times) - 1]

    settings = JudgeSettings(enabled=True, backoff_s=10.0)  # a back-off would take seconds: Retry-After wins
    client = httpx.Client(base_url="http://judge", transport=httpx.MockTransport(answer))
    assert judge_episodes(store, settings, client=client) == {
        "success": 1,
        "failure": 0,
        "unclear": 0,
        "error": 0,
    }
    assert len(times) == 3
    assert 0.3 <= times[1] - times[0] < 2.0
    assert times[2] - times[1] < 2.0
    assert store.get(episode.id).is_successful is True

    # A request the server refuses as bad is not repeated.
    again = Episode(goal="Mute the phone", status=EpisodeStatus.FAILED, steps=episode.steps)
    store.save_episode(again)
    store.save_step(again.id, episode.steps[0])
    refused: list[int] = []

    def bad_request(request: httpx.Request) -> httpx.Response:
        refused.append(1)
        return httpx.Response(400, json={"error": "bad request"})

    client = httpx.Client(base_url="http://judge", transport=httpx.MockTransport(bad_request))
    assert judge_episodes(store, settings, client=client)["error"] == 1
    assert len(refused) == 1
