from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from agent.policy import PolicyResult
from tests.serve.conftest import ScriptedPolicy

pytestmark = pytest.mark.timeout(120)


class ClickPolicy(ScriptedPolicy):
    async def predict(self, turns, *, sampling=None, model=None):  # type: ignore[no-untyped-def]
        return PolicyResult.from_text(
            '<think>tap</think><action>{"action": "click", "coordinate": [546, 1204]}</action>',
            model_version="click-v1",
        )


def b64(image: Image.Image, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode()


def test_predict_maps_the_action_to_the_screenshots_pixels(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ClickPolicy())
    client = service.client(service.agent)
    shot = b64(Image.new("RGB", (1080, 2400), "white"))
    reply = client.post("/v1/predict", json={"goal": "Turn on Wi-Fi", "screenshots": [shot]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["resized"] == [1092, 2408]
    assert body["action"] == {"action": "click", "coordinate": [546, 1204]}
    assert body["device_action"] == {"action": "click", "coordinate": [540, 1200]}
    assert body["model_version"] == "click-v1"
    jpeg = client.post(
        "/v1/predict",
        json={
            "goal": "g",
            "screenshots": [shot, b64(Image.new("RGB", (1080, 2400)), "JPEG")],
            "history": ["<think></think><action>{}</action>"],
        },
    )
    assert jpeg.status_code == 200


def test_bad_uploads_get_clear_4xx(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service(ClickPolicy(), max_upload_bytes=50_000)
    client = service.client(service.agent)
    good = b64(Image.new("RGB", (100, 200)))
    cases = {
        "not base64!!": 422,
        base64.b64encode(b"\x89PNG\r\n\x1a\n truncated").decode(): 422,
        b64(Image.new("RGB", (100, 200)), "GIF"): 415,
        b64(Image.effect_noise((400, 400), 100).convert("RGB")): 413,
    }
    for shot, expected in cases.items():
        reply = client.post("/v1/predict", json={"goal": "g", "screenshots": [shot]})
        assert reply.status_code == expected, (expected, reply.text)
        assert "screenshot 0" in reply.json()["detail"]
    mismatch = client.post("/v1/predict", json={"goal": "g", "screenshots": [good], "history": ["x"]})
    assert mismatch.status_code == 400
    assert client.post("/v1/predict", json={"goal": "g", "screenshots": []}).status_code == 422
    assert service.client().post("/v1/predict", json={"goal": "g", "screenshots": [good]}).status_code == 401
