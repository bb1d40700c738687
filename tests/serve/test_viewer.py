"""The trajectory viewer in headless Chromium (Debian's package) against the live service.

The page is loaded the way a user opens a link the demo prints (key in the URL fragment), the
action overlay is checked on a screenshot the browser takes, and feedback and takeover are done
by clicking the page's own buttons.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from agent.policy import PolicyResult, SamplingSettings
from agent.prompt import Turn
from tests.serve.test_api import wait_finished

pytestmark = pytest.mark.timeout(240)

CHROMIUM = os.environ.get("UIS1_TEST_CHROMIUM", "/usr/bin/chromium")


def respond(thought: str, action: str) -> str:
    return f"<think>\n{thought}\n</think>\n<action>\n{action}\n</action>"


CLICK = respond("Tap the Settings icon", '{"action": "click", "coordinate": [300, 1500]}')
SWIPE = respond(
    "Scroll the list", '{"action": "swipe", "coordinate": [546, 1800], "coordinate2": [546, 600]}'
)
TYPE = respond("Type the name", '{"action": "type", "text": "Anna"}')
WAIT = respond("Nothing to do yet", '{"action": "wait", "time": 0}')
DONE = respond("Finished", '{"action": "terminate", "status": "success"}')


class ListPolicy:
    """Answers step k with responses[k] (the last one repeats), after a delay."""

    model_version = "viewer-test-v1"

    def __init__(self, responses: list[str], delay_s: float = 0.0) -> None:
        self.responses = responses
        self.delay_s = delay_s

    async def predict(
        self, turns: Sequence[Turn], *, sampling: SamplingSettings | None = None, model: str | None = None
    ) -> PolicyResult:
        index = sum(1 for t in turns if t.role == "assistant")
        await asyncio.sleep(self.delay_s)
        raw = self.responses[min(index, len(self.responses) - 1)]
        return PolicyResult.from_text(raw, model_version=self.model_version, latency_s=self.delay_s)

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"Chromium not found at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def open_viewer(browser: Any, service: Any, task_id: str, width: int = 1200, height: int = 1000) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    page.goto(f"{service.url}/viewer/tasks/{task_id}#key={service.agent}")
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    return page


def human_steps(client: httpx.Client, task_id: str, timeout: float = 30) -> list[dict[str, Any]]:
    """The task's steps a person took, once there is one (empty if none came within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
        if human := [s for s in steps if s["source"] == "human"]:
            return human
        time.sleep(0.2)
    return []


def red_fraction(png: bytes, box: tuple[int, int, int, int]) -> float:
    """Share of pixels in ``box`` that are the overlay's mark colour (#ff2d55)."""
    image = Image.open(io.BytesIO(png)).convert("RGB").crop(box)
    pixels = [image.getpixel((x, y)) for x in range(image.width) for y in range(image.height)]
    red = sum(1 for r, g, b in pixels if r > 200 and g < 90 and 50 < b < 130)
    return red / len(pixels)


def test_viewer_pages_answer_401_with_a_sign_in_form_and_cookies_need_the_csrf_header(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ListPolicy([DONE]))
    anonymous = service.client()
    page = anonymous.get("/viewer")
    assert page.status_code == 401
    assert 'id="login"' in page.text
    assert "script-src 'nonce-" in page.headers["content-security-policy"]
    forged = httpx.Client(base_url=service.url, cookies={"uis1_key": "uis1_x_y"}, timeout=30)
    assert forged.get("/viewer/tasks/abc").status_code == 401

    assert anonymous.post("/v1/session", json={"key": service.agent}).status_code == 403  # no CSRF header
    csrf = {"X-UIS1-CSRF": "1"}
    assert anonymous.post("/v1/session", json={"key": "uis1_nope_nope"}, headers=csrf).status_code == 401
    signed_in = anonymous.post("/v1/session", json={"key": service.agent}, headers=csrf)
    assert signed_in.status_code == 200
    cookie = signed_in.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie

    browser_like = httpx.Client(base_url=service.url, cookies={"uis1_key": service.agent}, timeout=30)
    assert browser_like.get("/viewer").status_code == 200
    assert browser_like.get("/v1/tasks").status_code == 200
    # A cross-site form post carries the cookie but cannot add the header.
    assert browser_like.post("/v1/tasks", json={"goal": "forged"}).status_code == 403
    created = browser_like.post("/v1/tasks", json={"goal": "from the page"}, headers=csrf)
    assert created.status_code == 202
    # The cookie grants what the key grants, no more.
    assert (
        browser_like.post("/v1/devices/connect", json={"address": "127.0.0.1:9"}, headers=csrf).status_code
        == 403
    )
    assert browser_like.delete("/v1/session", headers=csrf).status_code == 204


def test_viewer_replays_a_finished_task_with_each_action_drawn_on_its_screenshot(
    make_service, browser, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ListPolicy([CLICK, SWIPE, TYPE, DONE]))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "Find Anna"}).json()["id"]
    assert wait_finished(client, task_id)["status"] == "succeeded"
    steps = client.get(f"/v1/trajectories/{task_id}").json()["steps"]
    tap_x, tap_y = steps[0]["device_action"]["coordinate"]

    page = open_viewer(browser, service, task_id)
    assert "#key=" not in page.url  # the key left the address bar
    assert page.locator("#goal").inner_text() == "Find Anna"
    assert page.locator("#status").inner_text() == "succeeded"
    assert page.locator("#strip li").count() == 4

    page.locator("#strip li").nth(0).click()
    page.wait_for_function("() => document.getElementById('shot').complete")
    assert page.locator("#thought").inner_text() == "Tap the Settings icon"
    assert "viewer-test-v1" in page.locator("#detail").inner_text()
    frame = page.locator("#frame")
    png = frame.screenshot(path=str(tmp_path / "click.png"))
    box = frame.bounding_box()
    scale = box["width"] / 1080
    x, y = round(tap_x * scale), round(tap_y * scale)
    assert red_fraction(png, (x - 4, y - 4, x + 4, y + 4)) > 0.9  # the tap point
    assert red_fraction(png, (0, 0, 60, 60)) == 0  # and nothing drawn elsewhere

    page.locator("#strip li").nth(1).click()
    page.wait_for_selector("#overlay polygon.arrow")
    png = frame.screenshot(path=str(tmp_path / "swipe.png"))
    (x1, y1), (x2, y2) = steps[1]["device_action"]["coordinate"], steps[1]["device_action"]["coordinate2"]
    mid_x, mid_y = round((x1 + x2) / 2 * scale), round((y1 + y2) / 2 * scale)
    assert red_fraction(png, (mid_x - 2, mid_y - 2, mid_x + 2, mid_y + 2)) > 0.9  # the swipe's shaft

    page.locator("#strip li").nth(2).click()
    assert page.locator("#overlay text").text_content() == '⌨ typed: "Anna"'
    assert not page.errors

    page.locator("#comment").fill("tapped the right thing")
    page.locator("[data-outcome=partial]").click()
    page.wait_for_function("() => document.getElementById('feedback-state').textContent.includes('partial')")
    task = client.get(f"/v1/tasks/{task_id}").json()
    assert task["feedback"] == "partial"
    page.close()


def test_viewer_follows_a_running_task_live_and_a_click_on_the_screen_takes_over_a_step(
    make_service, browser, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ListPolicy([WAIT], delay_s=0.3))
    client = service.client(service.agent)
    task_id = client.post("/v1/tasks", json={"goal": "Wait for me", "max_steps": 60}).json()["id"]
    page = open_viewer(browser, service, task_id)
    page.wait_for_function(
        "() => document.querySelectorAll('#strip li').length >= 2", timeout=30_000
    )  # live steps
    assert page.locator("#status").inner_text() == "running"

    page.locator("#pause").click()
    page.wait_for_selector("#manual:not(.hidden)")
    page.wait_for_function("() => document.getElementById('live').naturalWidth > 0")
    assert client.get(f"/v1/tasks/{task_id}").json()["paused"] is True
    # The panel shows what the model proposes for the held step (what "Resume" would run).
    page.wait_for_function("() => document.getElementById('proposal').textContent.includes('proposes wait')")
    page.locator("#hold").check()  # keep control: held again after the person's step
    live = page.locator("#live")
    box = live.bounding_box()
    live.click(position={"x": box["width"] * 0.25, "y": box["height"] * 0.5})
    page.screenshot(path=str(tmp_path / "takeover.png"), full_page=True)

    human = human_steps(client, task_id)
    assert human, "the takeover step was not recorded"
    x, y = human[0]["device_action"]["coordinate"]
    assert abs(x - 270) <= 3
    assert abs(y - 1200) <= 3
    page.wait_for_function(
        "() => [...document.querySelectorAll('#strip li')].some(li => li.textContent.includes('✋'))"
    )
    held_at = human[0]["index"] + 1
    deadline = time.monotonic() + 30
    while (client.get(f"/v1/tasks/{task_id}").json()["held"] or {}).get("index") != held_at:
        assert time.monotonic() < deadline, "the task was not held again after the person's step"
        time.sleep(0.1)
    assert page.locator("#manual").is_visible()
    page.locator("#hold").uncheck()
    page.locator("#resume").click()  # the model's own action, and the task runs on by itself
    deadline = time.monotonic() + 30
    while client.get(f"/v1/tasks/{task_id}").json()["steps"] < held_at + 3:
        assert time.monotonic() < deadline, "the task did not go on after Resume"
        time.sleep(0.1)
    assert client.get(f"/v1/tasks/{task_id}").json()["paused"] is False

    assert client.post(f"/v1/tasks/{task_id}/cancel").json()["status"] == "cancelled"
    page.wait_for_function("() => document.getElementById('status').textContent === 'cancelled'")
    assert page.locator("#feedback").is_visible()  # feedback is offered once it has finished
    assert page.locator("#takeover").is_hidden()
    assert not page.errors
    page.close()


def test_on_a_phone_screen_the_paused_panel_draws_the_proposal_and_a_person_swipes(
    make_service, browser, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ListPolicy([CLICK], delay_s=0.2))
    client = service.client(service.agent)
    body = {"goal": "Open Settings", "max_steps": 60, "paused": True}  # held from its first step
    task_id = client.post("/v1/tasks", json=body).json()["id"]
    page = open_viewer(browser, service, task_id, width=390, height=844)
    page.wait_for_selector("#manual:not(.hidden)", timeout=30_000)
    page.wait_for_function("() => document.getElementById('proposal').textContent.includes('proposes click')")
    page.wait_for_function("() => document.querySelectorAll('#live-overlay circle').length > 0")
    # Nothing wider than the phone's screen: no sideways scrolling.
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    live = page.locator("#live")
    live.scroll_into_view_if_needed()
    box = live.bounding_box()
    assert box["width"] <= 390
    page.screenshot(path=str(tmp_path / "phone.png"), full_page=True)
    # The proposed tap (300, 1500 on a 1080x2400 screen) is marked where it would land.
    scale = box["width"] / 1080
    shot = live.screenshot()
    local = (int(300 * scale), int(1500 * scale))
    around = (local[0] - 12, local[1] - 12, local[0] + 12, local[1] + 12)
    assert red_fraction(shot, around) > 0.2
    elsewhere = (int(box["width"] * 0.7), 10, int(box["width"] * 0.7) + 24, 34)
    assert red_fraction(shot, elsewhere) < 0.02

    page.locator("input[name=mode][value=swipe]").check()
    live.click(position={"x": box["width"] * 0.5, "y": box["height"] * 0.75})
    assert "now click where it ends" in page.locator("#takeover-message").inner_text()
    live.click(position={"x": box["width"] * 0.5, "y": box["height"] * 0.25})
    human = human_steps(client, task_id)
    assert human, "the person's swipe was not recorded"
    action = human[0]["device_action"]
    assert action["action"] == "swipe"
    assert abs(action["coordinate"][1] - 1800) <= 5
    assert abs(action["coordinate2"][1] - 600) <= 5
    assert human[0]["thought"] in (None, "")  # a person's step carries no model thought
    assert human[0]["policy_s"] in (None, 0)
    assert client.post(f"/v1/tasks/{task_id}/cancel").json()["status"] == "cancelled"
    assert not page.errors
    page.close()
