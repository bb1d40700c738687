"""A secret typed into a password field reaches the phone and nothing else: not the store, the
logs, the event stream, the viewer, exports or curation's training data (agent.secrets)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from agent.secrets import MASK
from agent.store import TrajectoryStore
from serve.ops.logs import JsonFormatter
from tests.serve.conftest import ScriptedPolicy
from tests.serve.test_api import _held, _listen, wait_finished

pytestmark = pytest.mark.timeout(180)

SECRET = "hunter2-Qx9!"  # what the policy types
TYPED = "s3cret-by-hand"  # what a person types


class SecretPolicy(ScriptedPolicy):
    """Types the secret (and names it in its thought), then finishes."""

    async def predict(self, turns, *, sampling=None, model=None):  # type: ignore[no-untyped-def,override]
        from agent.policy import PolicyResult

        index = sum(1 for t in turns if t.role == "assistant")
        if index == 0:
            raw = (
                f"<think>\nthe password is {SECRET}, type it\n</think>\n"
                f'<action>\n{{"action": "type", "text": "{SECRET}"}}\n</action>'
            )
        else:
            raw = '<think>\ndone\n</think>\n<action>\n{"action": "terminate", "status": "success"}\n</action>'
        return PolicyResult.from_text(raw, model_version=self.model_version, latency_s=0.0)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _database_text(path: Path) -> str:
    """Every row of every table of the store, as text."""
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for t in tables for row in db.execute(f'SELECT * FROM "{t}"'))


def test_a_secret_typed_by_the_policy_or_a_person_is_kept_nowhere(make_service, fleet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    collect = _Collect()
    root = logging.getLogger()
    root.addHandler(collect)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        service = make_service(SecretPolicy())
        client = service.client(service.agent)
        device = fleet.devices[0]
        shop = device.phone.app("com.example.shop")

        def at_card() -> None:  # the checkout form with the card field (password="true") focused
            device.phone.start("com.example.shop", ".CheckoutActivity")
            shop.checkout = type(shop.checkout)()
            device.phone.focus(shop.checkout.card)

        # The policy types it; a person approves.
        body = {"goal": "pay", "device": {"serial": device.serial}, "approval": {"password_fields": True}}
        at_card()
        approved = client.post("/v1/tasks", json=body).json()["id"]
        listener, events = _listen(service, approved)
        held = _held(client, approved, 0)
        assert held["reason"] == "typing into a password field needs approval"
        assert held["proposed_action"] == {"action": "type", "text": MASK}  # the person approves blind
        assert client.post(f"/v1/tasks/{approved}/resume").status_code == 200
        assert wait_finished(client, approved)["status"] == "succeeded"
        listener.join(30)
        assert shop.checkout.card.value == SECRET  # the phone got it

        # A person types it through the takeover API.
        at_card()
        taken = client.post("/v1/tasks", json={**body, "approval": {"every_step": True}}).json()["id"]
        listener2, events2 = _listen(service, taken)
        _held(client, taken, 0)
        action = {"action": "type", "text": TYPED}
        assert client.post(f"/v1/tasks/{taken}/takeover", json={"action": action}).status_code == 200
        _held(client, taken, 1)
        assert client.post(f"/v1/tasks/{taken}/resume").status_code == 200
        assert wait_finished(client, taken)["status"] == "succeeded"
        listener2.join(30)
        assert shop.checkout.card.value == TYPED

        steps = client.get(f"/v1/trajectories/{approved}").json()["steps"]
        assert steps[0]["secret"] == {"length": len(SECRET), "focus": "password"}
        assert steps[0]["action"] == {"action": "type", "text": MASK}
        human = client.get(f"/v1/trajectories/{taken}").json()["steps"][0]
        assert human["source"] == "human"
        assert human["secret"] == {"length": len(TYPED), "focus": "password"}

        # Everything that keeps or shows the steps.
        admin = service.client(service.admin)
        shown = [
            client.get(f"/v1/tasks/{approved}").text,
            client.get(f"/v1/trajectories/{approved}").text,
            client.get(f"/v1/trajectories/{taken}").text,
            client.get("/v1/trajectories/export").text,
            client.get(f"/viewer/tasks/{approved}").text,
            client.get(f"/viewer/tasks/{taken}").text,
            repr(events),
            repr(events2),
        ]
        for task_id in (approved, taken):
            assert (
                client.post(f"/v1/tasks/{task_id}/feedback", json={"outcome": "success"}).status_code == 200
            )
        store = TrajectoryStore(service.settings.store.url, service.settings.store.screenshot_dir)
        exported = store.export_jsonl(store.iter_all(), tmp_path / "export")
        from train.curation import curate

        curated = curate(store.iter_all(), tmp_path / "curated")
        assert curated.manifest["cut"].get("secret typed") == 2  # cut where the masked text would be a target
        kept = [
            *shown,
            exported.read_text(encoding="utf-8"),
            *(p.read_text(encoding="utf-8") for p in (tmp_path / "curated").glob("*.json*")),
            _database_text(Path(service.settings.store.url.removeprefix("sqlite:///"))),
            "\n".join(collect.lines),
            admin.get("/metrics").text,
        ]
        for secret in (SECRET, TYPED):
            leaks = [i for i, text in enumerate(kept) if secret in text]
            assert not leaks, f"{secret!r} kept in {leaks}"
        assert any(MASK in text for text in shown[:3])
    finally:
        root.removeHandler(collect)
        root.setLevel(old_level)
