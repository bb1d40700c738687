"""What the loop demo watches while it retrains and swaps: single-step requests that must keep
being answered, the job's progress, and the gate's decision."""

from __future__ import annotations

import base64
import io
import threading
import time
from pathlib import Path
from typing import Any


def _screenshot_b64() -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (1080, 2400), "white").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


class RequestStream:
    """Single-step requests sent one after another while the swap happens, counting failures."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token
        self.versions: dict[str, int] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-requests", daemon=True)

    def __enter__(self) -> RequestStream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    @property
    def sent(self) -> int:
        return sum(self.versions.values()) + len(self.failed)

    def _run(self) -> None:
        import httpx

        body = {"goal": "Turn on Wi-Fi", "screenshots": [_screenshot_b64()], "sampling": {"max_tokens": 16}}
        with httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        ) as http:
            while not self._stop.is_set():
                try:
                    reply = http.post("/v1/predict", json=body)
                except httpx.HTTPError as exc:
                    self.failed.append(type(exc).__name__)
                    continue
                if reply.status_code == 200:
                    version = str(reply.json().get("model_version"))
                    self.versions[version] = self.versions.get(version, 0) + 1
                else:
                    self.failed.append(f"{reply.status_code}: {reply.text[:200]}")
                self._stop.wait(0.2)


def state_of(client: Any, name: str) -> str | None:
    """The candidate's state once the gate decided (promoted or rejected), else None."""
    versions = client.models()["versions"]
    state = next((v["state"] for v in versions if v["name"] == name), None)
    return state if state in ("promoted", "rejected") else None


def gate_decision(client: Any, candidate: str, timeout_s: float = 600) -> str | None:
    """The candidate's state once the service's gate has taken it (promoted or rejected); None if
    it had not after ``timeout_s`` (the gate runs in the service after the job)."""
    from serve.demo.loop.person import poll

    return poll(lambda: state_of(client, candidate), timeout_s, every=0.5)  # type: ignore[no-any-return]


def follow_job(client: Any, job_id: str, steps: int, console: Any) -> dict[str, Any]:
    """A progress bar for the job: its stage, and the training steps its run has written."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task("retraining: starting", total=steps)
        while True:
            job = client.job(job_id)
            detail = job.get("detail") or {}
            stage = detail.get("stage") or job["status"]
            metrics = Path(detail["job_dir"]) / "sft" / "metrics.jsonl" if detail.get("job_dir") else None
            done = sum(1 for _ in metrics.open(encoding="utf-8")) if metrics and metrics.is_file() else 0
            progress.update(bar, completed=min(done, steps), description=f"retraining: {stage}")
            if job["status"] in ("succeeded", "failed", "skipped"):
                if job["status"] == "succeeded":
                    progress.update(bar, completed=steps)
                return job  # type: ignore[no-any-return]
            time.sleep(0.5)
