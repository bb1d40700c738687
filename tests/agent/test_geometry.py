from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.geometry import (
    MAX_PIXELS,
    MIN_PIXELS,
    ResizeSettings,
    ScreenGeometry,
    Size,
    from_normalised,
    map_point,
    smart_resize,
    to_normalised,
)


@pytest.mark.parametrize(
    ("device", "max_pixels", "expected"),
    [
        # AndroidControl frames pass at (nearly) native resolution: 39x86 merged patches.
        (Size(1080, 2400), MAX_PIXELS, Size(1092, 2408)),
        (Size(1080, 2340), MAX_PIXELS, Size(1092, 2352)),
        (Size(1440, 3200), MAX_PIXELS, Size(1428, 3192)),
        # A serving budget of 1280 merged tokens shrinks the frame, keeping the aspect ratio.
        (Size(1080, 2400), 1280 * 28 * 28, Size(672, 1484)),
        (Size(200, 150), MAX_PIXELS, Size(196, 140)),
        # Below the minimum, the image is scaled up to it.
        (Size(20, 20), MIN_PIXELS, Size(56, 56)),
    ],
)
def test_smart_resize_matches_qwen25vl(device: Size, max_pixels: int, expected: Size) -> None:
    assert smart_resize(device, ResizeSettings(max_pixels=max_pixels)) == expected


def test_smart_resize_rejects_degenerate_images() -> None:
    with pytest.raises(ValueError, match="positive"):
        smart_resize(Size(0, 10))
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(Size(10, 2100))
    with pytest.raises(ValueError, match="min_pixels"):
        ResizeSettings(min_pixels=10_000, max_pixels=1_000)


def test_the_method_mapping_example() -> None:
    geometry = ScreenGeometry.for_screen(Size(1080, 2400))
    assert geometry.resized == Size(1092, 2408)
    # x_dev = round(x * W_dev / W_resized)
    assert geometry.to_device((546, 1204)) == (540, 1200)
    assert geometry.to_resized((540, 1200)) == (546, 1204)
    # Clamped to the screen: a point past the edge lands on the last pixel.
    assert geometry.to_device((5000, -3)) == (1079, 0)


def test_normalised_space() -> None:
    screen = Size(1080, 2400)
    assert to_normalised((540, 1200), screen) == (500, 500)
    assert to_normalised((1080, 2400), screen) == (1000, 1000)
    assert from_normalised((1000, 1000), screen) == (1079, 2399)
    assert from_normalised((0, 0), screen) == (0, 0)


sizes = st.builds(Size, st.integers(min_value=28, max_value=4000), st.integers(min_value=28, max_value=4000))


@settings(max_examples=300, deadline=None)
@given(sizes, st.integers(min_value=4, max_value=16384))
def test_smart_resize_invariants(size: Size, tokens: int) -> None:
    s = ResizeSettings(max_pixels=max(tokens * 28 * 28, MIN_PIXELS))
    if max(size) / min(size) > 200:
        return
    out = smart_resize(size, s)
    assert out.width % 28 == 0
    assert out.height % 28 == 0
    if size.width * size.height >= s.min_pixels and min(out) > 28:
        assert out.width * out.height <= s.max_pixels
    if out.width * out.height < s.min_pixels:
        assert out.width * out.height <= s.max_pixels  # the minimum is only missed for the maximum's sake
    # Aspect ratio survives up to one factor of rounding on each side.
    assert abs(out.width / out.height - size.width / size.height) <= (
        28 / out.height + 28 * size.width / (size.height * out.height) + 1e-9
    ) * max(1.0, size.width / size.height)
    # Idempotent: a resized image resizes to itself (why the prompt may pre-resize). Only a side
    # pinned at the 28-px floor can leave the area over budget, and then the next pass shrinks it.
    if s.min_pixels <= out.width * out.height <= s.max_pixels:
        assert smart_resize(out, s) == out


@settings(max_examples=500, deadline=None)
@given(sizes, sizes, st.data())
def test_round_trip_from_the_coarser_image_is_exact(a: Size, b: Size, data: st.DataObject) -> None:
    coarse, fine = (a, b) if a.width <= b.width and a.height <= b.height else (b, a)
    if not (coarse.width <= fine.width and coarse.height <= fine.height):
        return
    x = data.draw(st.integers(min_value=0, max_value=coarse.width - 1))
    y = data.draw(st.integers(min_value=0, max_value=coarse.height - 1))
    assert map_point(map_point((x, y), coarse, fine), fine, coarse) == (x, y)


@settings(max_examples=500, deadline=None)
@given(sizes, sizes, st.data())
def test_any_round_trip_is_within_one_pixel_of_the_other_image(a: Size, b: Size, data: st.DataObject) -> None:
    x = data.draw(st.integers(min_value=0, max_value=a.width - 1))
    y = data.draw(st.integers(min_value=0, max_value=a.height - 1))
    back = map_point(map_point((x, y), a, b), b, a)
    # One pixel of ``b`` (rounding, or clamping at the last pixel) is a.width / b.width pixels of ``a``.
    assert abs(back[0] - x) <= a.width / b.width + 1
    assert abs(back[1] - y) <= a.height / b.height + 1
    assert 0 <= back[0] < a.width
    assert 0 <= back[1] < a.height


@settings(max_examples=300, deadline=None)
@given(sizes, st.data())
def test_normalised_round_trip(size: Size, data: st.DataObject) -> None:
    x = data.draw(st.integers(min_value=0, max_value=1000))
    y = data.draw(st.integers(min_value=0, max_value=1000))
    px = from_normalised((x, y), size)
    back = to_normalised(px, size)
    assert abs(back[0] - x) <= 1000 / size.width + 1
    assert abs(back[1] - y) <= 1000 / size.height + 1
