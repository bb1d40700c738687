"""Image sizes and coordinate spaces.

Three spaces meet here:

- **device**: pixels of the phone's screen (what ``adb shell input tap`` takes), e.g. 1080x2400;
- **resized**: pixels of the screenshot after Qwen2.5-VL's ``smart_resize``; UI-S1 speaks in these;
- **normalised**: 0-1000 on both axes, the convention of other GUI models and of resolution-free
  storage.

Every mapping rounds to integers and clamps to the target image, so a point the model puts just
past the edge still lands on the screen.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Qwen2.5-VL: 14-px patches merged 2x2, so every side is a multiple of 28.
FACTOR = 28
# UI-S1's training settings: at least 4 merged tokens, at most 12800 (a 1080x2400 frame passes at
# native resolution). Serving often lowers the maximum for speed.
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 12800 * 28 * 28
# Qwen2.5-VL refuses images more elongated than this.
MAX_ASPECT_RATIO = 200
NORMALISED_MAX = 1000


class Size(NamedTuple):
    width: int
    height: int


class ResizeSettings(BaseModel):
    """The smart-resize parameters; the same values must reach the image processor."""

    model_config = ConfigDict(frozen=True)

    factor: int = Field(FACTOR, gt=0, description="Smart-resize factor (Qwen2.5-VL: 28)")
    min_pixels: int = Field(MIN_PIXELS, gt=0, description="Smallest resized image, in pixels")
    max_pixels: int = Field(MAX_PIXELS, gt=0, description="Largest resized image, in pixels (12800·28·28)")

    @model_validator(mode="after")
    def _ordered(self) -> ResizeSettings:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels {self.min_pixels} exceeds max_pixels {self.max_pixels}")
        if self.max_pixels < self.factor * self.factor:
            raise ValueError(f"max_pixels {self.max_pixels} is below one {self.factor}x{self.factor} cell")
        return self


def _round_by(value: float, factor: int) -> int:
    return round(value / factor) * factor


def _floor_by(value: float, factor: int) -> int:
    return math.floor(value / factor) * factor


def _ceil_by(value: float, factor: int) -> int:
    return math.ceil(value / factor) * factor


def smart_resize(size: Size, settings: ResizeSettings | None = None) -> Size:
    """Qwen2.5-VL's resize rule: sides multiples of ``factor``, area within [min, max], aspect kept.

    Same arithmetic as the reference implementation (Python's round, then floor/ceil by the
    factor after scaling by sqrt of the area ratio), so the sizes match the image processor's.
    """
    s = settings or ResizeSettings()
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio of {width}x{height} exceeds {MAX_ASPECT_RATIO}")
    h_bar = max(s.factor, _round_by(height, s.factor))
    w_bar = max(s.factor, _round_by(width, s.factor))
    if h_bar * w_bar > s.max_pixels:
        beta = math.sqrt(height * width / s.max_pixels)
        h_bar = max(s.factor, _floor_by(height / beta, s.factor))
        w_bar = max(s.factor, _floor_by(width / beta, s.factor))
    elif h_bar * w_bar < s.min_pixels:
        beta = math.sqrt(s.min_pixels / (height * width))
        h_bar = _ceil_by(height * beta, s.factor)
        w_bar = _ceil_by(width * beta, s.factor)
    return Size(w_bar, h_bar)


def image_tokens(size: Size, settings: ResizeSettings | None = None) -> int:
    """The tokens a screen of ``size`` becomes: one per ``factor`` x ``factor`` cell of its resized
    image (Qwen2.5-VL: 14-pixel patches, merged 2 x 2)."""
    s = settings or ResizeSettings()
    resized = smart_resize(size, s)
    return (resized.width // s.factor) * (resized.height // s.factor)


def _scale(value: float, source: int, target: int) -> int:
    """Map one axis from a ``source``-pixel image to a ``target``-pixel one, rounded and clamped."""
    return _clamp(round(value * target / source), target - 1)


def map_point(point: tuple[float, float], source: Size, target: Size) -> tuple[int, int]:
    """Map a pixel point between two images of the same screen (x_t = x_s * W_t / W_s)."""
    return (_scale(point[0], source.width, target.width), _scale(point[1], source.height, target.height))


def _clamp(value: int, upper: int) -> int:
    return min(max(value, 0), upper)


def to_normalised(point: tuple[float, float], source: Size) -> tuple[int, int]:
    """Pixels of ``source`` to the 0-1000 space (both ends inclusive)."""
    return (
        _clamp(round(point[0] * NORMALISED_MAX / source.width), NORMALISED_MAX),
        _clamp(round(point[1] * NORMALISED_MAX / source.height), NORMALISED_MAX),
    )


def from_normalised(point: tuple[float, float], target: Size) -> tuple[int, int]:
    """The 0-1000 space to pixels of ``target``."""
    return (
        _clamp(round(point[0] * target.width / NORMALISED_MAX), target.width - 1),
        _clamp(round(point[1] * target.height / NORMALISED_MAX), target.height - 1),
    )


class ScreenGeometry(BaseModel):
    """One screenshot's device size and the resized size the model saw: the mapping both ways."""

    model_config = ConfigDict(frozen=True)

    device: Size
    resized: Size

    @classmethod
    def for_screen(cls, device: Size, settings: ResizeSettings | None = None) -> ScreenGeometry:
        return cls(device=device, resized=smart_resize(device, settings))

    def to_device(self, point: tuple[float, float]) -> tuple[int, int]:
        return map_point(point, self.resized, self.device)

    def to_resized(self, point: tuple[float, float]) -> tuple[int, int]:
        return map_point(point, self.device, self.resized)
