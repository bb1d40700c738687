"""Hot swaps into the real vLLM CPU server while the service runs tasks on simulated phones.

The engine starts on the SFT-trained tiny model (the ``base`` version). A LoRA adapter trained
further on other tasks is swapped in while 8 episodes run: none fails, each step records the
version that produced it, and the adapter serves afterwards with other greedy output. A broken
adapter and a broken full checkpoint fail their canaries and the old version keeps serving;
rollbacks restore the previous version; a full checkpoint goes in place (new tasks wait, running
ones finish, then the weights reload).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.episode import EpisodeSettings
from agent.geometry import ResizeSettings
from agent.vllm_policy import VllmSettings
from serve.models.swap import SwapSettings
from tests.conftest import vllm_server
from tests.training import RESIZE, train_sft, write_config

pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]  # a vLLM server per module
SERVED = "uis1-policy"
GOALS = ["Turn on Wi-Fi", "Turn Bluetooth on", "Turn on airplane mode", "Turn off Wi-Fi"]


@pytest.fixture(scope="module")
def adapters(sft_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A LoRA adapter trained further (SFT on other tasks), the same merged into a full checkpoint,
    and a broken adapter (huge random weights)."""
    import torch
    from safetensors.torch import load_file, save_file

    from train.checkpoints import merge_adapter

    root = tmp_path_factory.mktemp("adapters")
    other = {"sources": [{"kind": "sim", "tasks": ["wifi_off", "bluetooth_off"]}], "val_fraction": 0.0}
    good = train_sft(sft_checkpoint, root, other, 30, learner={"lora": {"rank": 8, "alpha": 16}}, epochs=50)
    broken = root / "broken"
    import shutil

    shutil.copytree(good, broken)
    weights = load_file(broken / "adapter_model.safetensors")
    generator = torch.Generator().manual_seed(0)
    save_file(
        {k: torch.randn(v.shape, generator=generator) * 50 for k, v in weights.items()},
        broken / "adapter_model.safetensors",
    )
    merged = merge_adapter(good, root / "merged")
    return {"good": good, "broken": broken, "merged": merged}


@pytest.fixture(scope="module")
def vllm(sft_checkpoint: Path) -> Iterator[dict[str, Any]]:
    with vllm_server(sft_checkpoint, served_name=SERVED, env={"VLLM_SERVER_DEV_MODE": "1"}) as server:
        yield server


def greedy(base_url: str, model: str, goal: str) -> str:
    """The engine's greedy answer for a fixed screenshot and goal (the canary request)."""
    from agent.prompt import PromptSettings, to_openai_messages
    from serve.models.swap import canary_turns

    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    body = {
        "model": model,
        "messages": to_openai_messages(canary_turns(goal, prompt), prompt),
        "temperature": 0.0,
        "max_tokens": 96,
    }
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def test_swaps_under_load_canaries_and_rollbacks_on_the_real_vllm_server(  # type: ignore[no-untyped-def]
    make_service, fleet, vllm, sft_checkpoint, tiny_model_dir, adapters
) -> None:
    from agent.checkpoint import load_processor, vision_token_ids

    while len(fleet.devices) < 8:
        fleet.add()
    suppress = tuple(vision_token_ids(load_processor(sft_checkpoint).tokenizer))
    service = make_service(
        own_policy=True,
        resize=ResizeSettings(**RESIZE),
        policy=VllmSettings(
            base_url=vllm["base_url"], model=SERVED, suppress_token_ids=suppress, timeout_s=120
        ),
        swap=SwapSettings(
            canary_goal="Turn on Wi-Fi", canary_max_tokens=96, hold_grace_s=1.0, auto_promote=False
        ),
        # Slow steps (2 s for the screen to settle) keep the 8 episodes running across the swap.
        episode=EpisodeSettings(settle_s=2.0, max_steps=8, sampling={"max_tokens": 96}),
    )
    admin, agent = service.client(service.admin), service.client(service.agent)
    for body in (
        {"name": "sft", "served_name": SERVED, "base": str(sft_checkpoint), "kind": "base"},
        {"name": "lora-good", "base": str(sft_checkpoint), "adapter": str(adapters["good"]), "parent": "sft"},
        {"name": "lora-broken", "base": str(sft_checkpoint), "adapter": str(adapters["broken"])},
        {
            "name": "full-merged",
            "served_name": SERVED,
            "base": str(adapters["merged"]),
            "kind": "full",
            "parent": "lora-good",
        },
        {"name": "full-broken", "served_name": SERVED, "base": str(tiny_model_dir), "kind": "full"},
    ):
        assert admin.post("/v1/models", json=body).status_code == 201, body
    assert admin.post("/v1/models/promote", json={"version": "sft"}).json()["default"] == "sft"
    before = greedy(vllm["base_url"], SERVED, "Turn off Wi-Fi")

    def submit(count: int) -> list[str]:
        ids = []
        for k in range(count):
            response = agent.post(
                "/v1/tasks",
                json={"goal": GOALS[k % len(GOALS)], "device": {"serial": fleet.devices[k].serial}},
            )
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])
        return ids

    def task(task_id: str) -> dict[str, Any]:
        return dict(agent.get(f"/v1/tasks/{task_id}").json())

    def trajectory(task_id: str) -> dict[str, Any]:
        """The task's record with its steps."""
        body = agent.get(f"/v1/trajectories/{task_id}").json()
        return {**body["task"], "steps": body["steps"]}

    def finished(ids: list[str]) -> bool:
        return all(task(i)["status"] not in ("pending", "running") for i in ids)

    def retries() -> float:
        """Policy requests sent again so far (the service's own counter)."""
        text = admin.get("/metrics").text
        return sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("uis1_policy_retries_total")
        )

    # -- an adapter swapped in while 8 episodes run -------------------------------------------------
    retried_before = retries()
    running = submit(8)
    wait_until(
        lambda: all(task(i)["status"] == "running" and task(i)["steps"] >= 1 for i in running),
        300,
        "8 running episodes",
    )
    swap_started = time.time()
    promoted = admin.post("/v1/models/promote", json={"version": "lora-good"}, timeout=300)
    swap_done = time.time()
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["default"] == "lora-good"
    assert any(task(i)["status"] == "running" for i in running)  # the swap did not wait for them
    wait_until(lambda: finished(running), 600, "the 8 episodes to end")
    for task_id in running:
        record = trajectory(task_id)
        assert record["status"] != "error", record.get("error")  # no request failed
        assert record["model_version"] == "sft"
        assert {s["model_version"] for s in record["steps"]} == {"sft"}  # started on sft, kept it
        assert all(s["raw_response"] for s in record["steps"])
    assert retries() == retried_before  # no request failed, not even once before a retry
    after = submit(2)
    wait_until(lambda: finished(after), 300, "tasks after the swap")
    for task_id in after:
        record = trajectory(task_id)
        assert {s["model_version"] for s in record["steps"]} == {"lora-good"}
    assert greedy(vllm["base_url"], "lora-good", "Turn off Wi-Fi") != before  # other weights, other output
    assert swap_done - swap_started < 60

    # -- a broken adapter fails its canary; the good one keeps serving ------------------------------
    refused = admin.post("/v1/models/promote", json={"version": "lora-broken"}, timeout=300)
    assert refused.status_code == 409
    assert "canary" in refused.json()["detail"]
    models = agent.get("/v1/models").json()
    assert models["default"] == "lora-good"
    assert {v["name"]: v["state"] for v in models["versions"]}["lora-broken"] == "rejected"
    served = httpx.get(f"{vllm['base_url']}/v1/models").json()["data"]
    assert "lora-broken" not in {m["id"] for m in served}  # unloaded again

    # -- rollback restores the previous version -----------------------------------------------------
    rolled = admin.post("/v1/models/rollback", json={"reason": "test"}, timeout=300).json()
    assert rolled["default"] == "sft"
    assert {v["name"]: v["state"] for v in rolled["versions"]}["lora-good"] == "rejected"
    back = submit(1)
    wait_until(lambda: finished(back), 300, "a task after the rollback")
    assert {s["model_version"] for s in trajectory(back[0])["steps"]} == {"sft"}

    # -- a full checkpoint in place: new tasks wait, running ones finish, then the weights reload ---
    running = submit(2)
    wait_until(lambda: all(task(i)["status"] == "running" for i in running), 300, "2 running episodes")
    promoted = admin.post("/v1/models/promote", json={"version": "full-merged"}, timeout=600)
    assert promoted.status_code == 200, promoted.text
    for task_id in running:
        record = trajectory(task_id)
        assert record["status"] != "error", record.get("error")
        assert record["status"] not in ("pending", "running")  # drained before the reload
        assert {s["model_version"] for s in record["steps"]} == {"sft"}
    merged_answer = greedy(vllm["base_url"], SERVED, "Turn off Wi-Fi")
    assert merged_answer != before
    later = submit(1)
    wait_until(lambda: finished(later), 300, "a task after the in-place swap")
    assert {s["model_version"] for s in trajectory(later[0])["steps"]} == {"full-merged"}
    # A task that asks for the weights the engine no longer holds is refused, not served wrongly.
    stale = agent.post("/v1/tasks", json={"goal": "Turn on Wi-Fi", "model": "sft"})
    assert stale.status_code == 422
    assert "not being served" in stale.text

    # -- a broken full checkpoint fails its canary; the previous weights are reloaded ---------------
    refused = admin.post("/v1/models/promote", json={"version": "full-broken"}, timeout=600)
    assert refused.status_code == 409
    assert agent.get("/v1/models").json()["default"] == "full-merged"
    assert greedy(vllm["base_url"], SERVED, "Turn off Wi-Fi") == merged_answer

    # -- and rolled back in place -------------------------------------------------------------------
    assert admin.post("/v1/models/rollback", json={}, timeout=600).json()["default"] == "sft"
    assert greedy(vllm["base_url"], SERVED, "Turn off Wi-Fi") == before


def test_the_command_line_promotes_and_rolls_back_through_the_version_router(  # type: ignore[no-untyped-def]
    vllm, sft_checkpoint, adapters, tmp_path
) -> None:
    """``uis1 models promote|rollback`` against the running engine: the hot swap (adapter load,
    canary, alias flip) and its result, as the service's routes do it."""
    import json
    import subprocess
    import sys

    from agent.checkpoint import load_processor, vision_token_ids
    from tests.training import clean_env

    suppress = list(vision_token_ids(load_processor(sft_checkpoint).tokenizer))
    env = {
        **clean_env(),
        "UIS1_STORE__URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "UIS1_STORE__SCREENSHOT_DIR": str(tmp_path / "shots"),
        "UIS1_POLICY__BASE_URL": vllm["base_url"],
        "UIS1_POLICY__MODEL": SERVED,
        "UIS1_POLICY__SUPPRESS_TOKEN_IDS": json.dumps(suppress),
        "UIS1_POLICY__TIMEOUT_S": "120",
        "UIS1_RESIZE__MAX_PIXELS": str(RESIZE["max_pixels"]),
        "UIS1_SWAP__CANARY_GOAL": "Turn on Wi-Fi",
        "UIS1_SWAP__CANARY_MAX_TOKENS": "96",
    }

    def cli(*args: str) -> str:
        command = [str(Path(sys.executable).parent / "uis1"), "models", *args]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    cli("register", "cli-sft", "--base", str(sft_checkpoint), "--served-name", SERVED, "--kind", "base")
    cli(
        "register",
        "cli-lora",
        "--base",
        str(sft_checkpoint),
        "--adapter",
        str(adapters["good"]),
        "--parent",
        "cli-sft",
    )
    assert cli("promote", "cli-sft").startswith("cli-sft now serves (was None; alias")
    assert cli("promote", "cli-lora").startswith("cli-lora now serves (was cli-sft; adapter")
    served = httpx.get(f"{vllm['base_url']}/v1/models").json()["data"]
    assert "cli-lora" in {m["id"] for m in served}  # loaded into the engine, not just recorded
    assert cli("rollback", "--reason", "test").startswith("cli-sft now serves (was cli-lora")
    listed = {v["name"]: v for v in json.loads(cli("list", "--json"))}
    assert listed["cli-lora"]["state"] == "rejected"
    assert "default" in listed["cli-sft"]["aliases"]


def test_labelled_traffic_is_retrained_gated_and_swapped_in_by_the_service(  # type: ignore[no-untyped-def]
    make_service, fleet, vllm, sft_checkpoint, tmp_path
) -> None:
    """The whole loop: tasks run on the real vLLM server, the simulated phones' checks label them
    through the feedback API, ``POST /v1/jobs`` runs ``uis1 retrain`` in a child process, the gate
    passes its candidate, and the swap puts it into the engine, which then answers with its weights."""
    from agent.checkpoint import load_processor, vision_token_ids
    from devices.sim.tasks import TASKS, Outcome
    from serve.models.gate import GateSettings
    from serve.ops.scheduler import SchedulerSettings

    store_dir = tmp_path / "retrain"
    config = write_config(
        tmp_path / "retrain.yaml",
        {
            "work_dir": str(store_dir),
            "served_name": SERVED,
            "version_prefix": "nightly",
            "min_new_episodes": 0,
            "curation": {"holdout_fraction": 0.0},
            "stages": ["sft"],
            "resize": RESIZE,
            # A gentle step on the data the engine's model was trained on: new weights, still sane answers.
            "extra_sources": [{"kind": "sim", "tasks": ["wifi_on", "bluetooth_on", "airplane_mode_on"]}],
            "sft": {"max_steps": 4, "batch_size": 4, "optim": {"lr": 3e-4}, "save_every": 4, "epochs": 10},
            "evaluation": {
                "holdout": False,
                "max_new_tokens": 72,
                "online": {"tasks": ["wifi_on"], "max_steps": 2, "max_new_tokens": 72},
            },
        },
    )
    suppress = tuple(vision_token_ids(load_processor(sft_checkpoint).tokenizer))
    service = make_service(
        own_policy=True,
        resize=ResizeSettings(**RESIZE),
        policy=VllmSettings(
            base_url=vllm["base_url"], model=SERVED, suppress_token_ids=suppress, timeout_s=120
        ),
        swap=SwapSettings(
            canary_goal="Turn on Wi-Fi",
            canary_max_tokens=96,
            hold_grace_s=1.0,
            gate=GateSettings(sop_score_tolerance=1.0, sop_tsr_tolerance=1.0, online_tolerance=1.0),
        ),
        scheduler=SchedulerSettings(retrain_config=config),
        episode=EpisodeSettings(settle_s=0.5, max_steps=4, sampling={"max_tokens": 96}),
    )
    while len(fleet.devices) < 8:
        fleet.add()
    # The retraining job reads the service's own store.
    body = yaml_load(config)
    body["store"] = {
        "url": service.settings.store.url,
        "screenshot_dir": str(service.settings.store.screenshot_dir),
    }
    write_config(config, body)
    admin, agent = service.client(service.admin), service.client(service.agent)
    registered = admin.post(
        "/v1/models", json={"name": "sft", "served_name": SERVED, "base": str(sft_checkpoint), "kind": "base"}
    )
    assert registered.status_code in (201, 409)  # 409: the module's first test registered it in its own store
    assert admin.post("/v1/models/promote", json={"version": "sft"}).json()["default"] == "sft"

    successes = 0
    for k, name in enumerate(["wifi_on", "bluetooth_on", "airplane_mode_on"]):
        task = TASKS[name].create(0)
        device = fleet.devices[k]
        task.initialize(device.phone)
        task_id = agent.post(
            "/v1/tasks", json={"goal": task.goal, "device": {"serial": device.serial}}
        ).json()["id"]
        wait_until(
            lambda i=task_id: agent.get(f"/v1/tasks/{i}").json()["status"] not in ("pending", "running"),
            300,
            "a task",
        )
        answer = agent.get(f"/v1/tasks/{task_id}").json()["answer"]
        ok = task.is_successful(device.phone, Outcome(answer=answer))
        successes += ok
        feedback = agent.post(
            f"/v1/tasks/{task_id}/feedback",
            json={"outcome": "success" if ok else "failure", "source": "checker"},
        )
        assert feedback.status_code == 200

    before = logprob(vllm["base_url"], SERVED)
    load = KeepBusy(service.url, service.agent, [d.serial for d in fleet.devices[:4]])
    load.start()  # 4 phones busy from now until after the swap
    job = admin.post("/v1/jobs", json={})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    done = wait_until(
        lambda: (
            (j := agent.get(f"/v1/jobs/{job_id}").json())["status"] in ("succeeded", "failed", "skipped")
            and j
        ),
        900,
        "the retraining job",
    )
    assert done["status"] == "succeeded", done["reason"]
    assert done["trigger"].startswith("api:")
    assert done["detail"]["curated"]["train"] == successes  # the checked successes became training data
    candidate = done["detail"]["candidate"]
    promoted = wait_until(lambda: agent.get("/v1/models").json()["default"] == candidate, 300, "the swap")
    assert promoted
    time.sleep(5)
    episodes = load.stop()
    assert not load.refused, load.refused[:3]  # no task submitted around the swap was refused
    record = agent.get(f"/v1/models/{candidate}").json()
    # Under load: none failed, each episode kept one version, and each step ran on the weights its
    # version names (old-version steps all ended before the flip, new-version ones began after it).
    from datetime import UTC, datetime

    from agent.store import TrajectoryStore

    def utc(value: Any) -> datetime:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # SQLite keeps no zone

    flip = utc(next(e["at"] for e in record["events"] if e["event"] == "promoted"))
    gates = [e for e in record["events"] if e["event"] == "annotated:gate"]
    assert len(gates) == 1, gates  # the job's end and the watcher both take it: gated once, swapped once
    gate = utc(gates[0]["at"])
    store = TrajectoryStore(service.settings.store.url, service.settings.store.screenshot_dir)
    ran = [store.get(i) for i in episodes]
    store.engine.dispose()
    assert all(e.status.value not in ("error", "interrupted") for e in ran), [e.error for e in ran]
    versions = {e.model_version for e in ran}
    assert versions == {"sft", candidate}
    for e in ran:
        assert {s.model_version for s in e.steps} == {e.model_version}
        assert all(s.raw_response for s in e.steps)
        if e.model_version == "sft":
            assert all(s.ended_at is not None and utc(s.ended_at) <= flip for s in e.steps)
        else:
            assert all(s.started_at is not None and utc(s.started_at) >= flip for s in e.steps)
    busy = [
        e for e in ran if e.started_at and utc(e.started_at) <= gate and utc(e.finished_at or flip) >= gate
    ]
    assert len(busy) >= 2, len(busy)  # episodes that were running when the gate passed and the swap began
    print(f"{len(ran)} episodes under load, {len(busy)} running when the swap began")
    assert record["state"] == "promoted"
    assert record["parent"] == "sft"
    assert record["info"]["gate"]["passed"] is True
    assert record["info"]["gate"]["baseline_version"] == "sft"
    assert record["events"][0]["event"] == "promoted"  # newest first
    assert logprob(vllm["base_url"], SERVED) != pytest.approx(
        before, abs=1e-6
    )  # the engine holds new weights
    listed = agent.get("/v1/jobs").json()["jobs"]
    assert listed[0]["id"] == job_id
    # Rolled back in place, the engine answers with the SFT weights again.
    assert admin.post("/v1/models/rollback", json={"reason": "test"}, timeout=600).json()["default"] == "sft"
    assert logprob(vllm["base_url"], SERVED) == pytest.approx(before, abs=1e-4)


class KeepBusy:
    """Keeps each phone running a task: a new one as soon as the last one ends."""

    def __init__(self, url: str, key: str, serials: list[str]) -> None:
        self.url, self.key, self.serials = url, key, serials
        self.ids: list[str] = []
        self.refused: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(s, k), daemon=True) for k, s in enumerate(serials)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, serial: str, k: int) -> None:
        with httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60
        ) as http:
            n = 0
            while not self._stop.is_set():
                goal = GOALS[(k + n) % len(GOALS)]
                answer = http.post("/v1/tasks", json={"goal": goal, "device": {"serial": serial}})
                if answer.status_code in (429, 503):  # busy: a client waits as Retry-After says
                    time.sleep(float(answer.headers.get("Retry-After", 1)))
                    continue
                if answer.status_code != 202:  # kept for the test to report; the phone keeps going
                    self.refused.append(f"{answer.status_code} {answer.text}")
                    time.sleep(1)
                    continue
                task_id = answer.json()["id"]
                self.ids.append(task_id)
                while http.get(f"/v1/tasks/{task_id}").json()["status"] in ("pending", "running"):
                    time.sleep(0.2)
                n += 1

    def stop(self) -> list[str]:
        self._stop.set()
        for thread in self._threads:
            thread.join(300)
        return list(self.ids)


def yaml_load(path: Path) -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(path.read_text()))


def logprob(base_url: str, model: str) -> float:
    """The log-probability the engine gives its first greedy token for the canary request."""
    from agent.prompt import PromptSettings, to_openai_messages
    from serve.models.swap import canary_turns

    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    body = {
        "model": model,
        "messages": to_openai_messages(canary_turns("Turn off Wi-Fi", prompt), prompt),
        "temperature": 0.0,
        "max_tokens": 4,
        "logprobs": True,
    }
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return float(response.json()["choices"][0]["logprobs"]["content"][0]["logprob"])


def test_a_full_checkpoint_goes_blue_green_onto_a_second_engine_and_back(  # type: ignore[no-untyped-def]
    make_service, fleet, vllm, sft_checkpoint, adapters
) -> None:
    """With a launch command the controller starts a second vLLM on the new weights, canaries it,
    records its URL on the version and routes new tasks there; after a rollback it stops it."""
    from agent.checkpoint import load_processor, vision_token_ids
    from tests.conftest import REPO

    launch = f"env UIS1_SERVED_MODEL_NAME={{served_name}} {REPO / 'scripts' / 'vllm-cpu'} serve {{weights}} --port {{port}}"
    suppress = tuple(vision_token_ids(load_processor(sft_checkpoint).tokenizer))
    service = make_service(
        own_policy=True,
        resize=ResizeSettings(**RESIZE),
        policy=VllmSettings(
            base_url=vllm["base_url"], model=SERVED, suppress_token_ids=suppress, timeout_s=120
        ),
        swap=SwapSettings(
            canary_goal="Turn on Wi-Fi",
            canary_max_tokens=96,
            auto_promote=False,
            launch_command=launch,
            launch_timeout_s=400,
            retire_after_s=1.0,
        ),
        episode=EpisodeSettings(settle_s=0.0, max_steps=4, sampling={"max_tokens": 96}),
    )
    admin, agent = service.client(service.admin), service.client(service.agent)
    for body in (
        {"name": "sft", "served_name": SERVED, "base": str(sft_checkpoint), "kind": "base"},
        {"name": "green", "base": str(adapters["merged"]), "kind": "full", "parent": "sft"},
    ):
        assert admin.post("/v1/models", json=body).status_code == 201
    assert admin.post("/v1/models/promote", json={"version": "sft"}).json()["default"] == "sft"
    promoted = admin.post("/v1/models/promote", json={"version": "green"}, timeout=600)
    assert promoted.status_code == 200, promoted.text
    green = agent.get("/v1/models/green").json()
    url = next(e["detail"]["endpoint"] for e in green["events"] if e["event"] == "endpoint")
    assert url != vllm["base_url"]
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "green"  # served under its own name
    task_id = agent.post("/v1/tasks", json={"goal": "Turn off Wi-Fi"}).json()["id"]
    wait_until(
        lambda: agent.get(f"/v1/tasks/{task_id}").json()["status"] not in ("pending", "running"),
        300,
        "a task on the green engine",
    )
    steps = agent.get(f"/v1/trajectories/{task_id}").json()["steps"]
    assert {s["model_version"] for s in steps} == {"green"}
    assert all(s["raw_response"] for s in steps)
    # The green engine holds the merged weights; the primary still holds the SFT ones.
    assert greedy(url, "green", "Turn off Wi-Fi") != greedy(vllm["base_url"], SERVED, "Turn off Wi-Fi")
    # Rolled back: the primary serves again, and the green engine is stopped once its episodes ended.
    assert admin.post("/v1/models/rollback", json={}, timeout=300).json()["default"] == "sft"

    def stopped() -> bool:
        try:
            httpx.get(f"{url}/health", timeout=2)
        except httpx.HTTPError:
            return True
        return False

    wait_until(stopped, 120, "the green engine to stop")


def test_a_swap_into_vllm_serves_only_the_weights_that_were_trained(  # type: ignore[no-untyped-def]
    vllm, sft_checkpoint, adapters, tmp_path
) -> None:
    """The weights fingerprint on the real engine: vLLM's prompt log-probabilities of the probe
    match the trainer's record (transformers, float32) within the tolerance, and a version whose
    served weights are not its trained ones is rejected before the alias moves."""
    import asyncio
    import shutil

    from agent import fingerprint
    from agent.checkpoint import load_processor, vision_token_ids
    from agent.prompt import PromptSettings
    from agent.registry import Kind, ModelRegistry, State
    from agent.store import TrajectoryStore
    from serve.models.swap import VllmSwapController
    from serve.models.swap.base import CanaryFailed
    from tests.serve.test_fingerprint import random_adapter

    store = TrajectoryStore(f"sqlite:///{tmp_path / 't.db'}", tmp_path / "shots")
    store.migrate()
    registry = ModelRegistry(store.engine)
    suppress = tuple(vision_token_ids(load_processor(sft_checkpoint).tokenizer))
    policy = VllmSettings(base_url=vllm["base_url"], model=SERVED, suppress_token_ids=suppress, timeout_s=120)
    prompt = PromptSettings(resize=ResizeSettings(**RESIZE))
    swap = VllmSwapController(
        store,
        registry,
        policy,
        prompt,
        SwapSettings(canary_goal="Turn on Wi-Fi", canary_max_tokens=96, retire_after_s=0),
    )
    other = random_adapter(sft_checkpoint, tmp_path / "other", 7)

    def register(
        name: str, adapter: Path | None, record_of: Path | None, served_name: str | None = None
    ) -> None:
        registry.register(
            name,
            base=str(sft_checkpoint),
            adapter=str(adapter) if adapter else None,
            kind=Kind.ADAPTER if adapter else Kind.BASE,
            served_name=served_name or (SERVED if adapter is None else name),
            info={fingerprint.INFO_KEY: fingerprint.of_weights(sft_checkpoint, record_of).record()},
        )

    async def go() -> None:
        register("fp-sft", None, None)
        first = (await swap.promote("fp-sft", actor="t")).canary["fingerprint"]
        assert first["verified"] is True, first  # vLLM's numbers and the trainer's agree
        register("fp-good", adapters["good"], adapters["good"])
        good = (await swap.promote("fp-good", actor="t")).canary["fingerprint"]
        assert good["verified"] is True, good
        assert good["records_apart"] > fingerprint.DEFAULT_TOLERANCE

        # A stale adapter: the serving adapter's files under a new name, recorded as trained.
        stale = shutil.copytree(adapters["good"], tmp_path / "stale")
        register("fp-stale", stale, other)
        with pytest.raises(CanaryFailed, match="answers as the previous version fp-good"):
            await swap.promote("fp-stale", actor="t")
        assert registry.get("fp-stale").state == State.REJECTED

        # A reload that did not take: a new version under the served name of the adapter the
        # engine holds; vLLM keeps what it loaded under that name (the swap sees the name served).
        register("fp-renamed", other, other, served_name="fp-good")
        with pytest.raises(CanaryFailed, match="answers as the previous version fp-good"):
            await swap.promote("fp-renamed", actor="t")
        assert registry.promoted().name == "fp-good"  # type: ignore[union-attr]
        await swap.aclose()

    asyncio.run(go())
