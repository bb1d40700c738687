"""Drawing a view tree with Pillow: legible text, simple icons, switches, text fields, a keyboard.

Looks are deliberately plain (flat Material-like colours, Pillow's bundled scalable font) but at a
real phone's resolution, so a vision model sees text of realistic size in realistic places.
"""

from __future__ import annotations

import dataclasses
import io
import random
from functools import cache

from PIL import Image, ImageChops, ImageDraw, ImageFont

from devices.sim.ui import View

ACCENT = "#1a73e8"


# DejaVu (Debian's fonts-dejavu-core) has the symbols the apps use as icons; Pillow's bundled
# font is the fallback and draws them as boxes.
FONT_FILES = ("DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


@cache
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    for name in FONT_FILES:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def _fit(draw: ImageDraw.ImageDraw, text: str, size: int, width: int) -> str:
    """Cut text with an ellipsis so it fits ``width`` pixels."""
    if width <= 0 or draw.textlength(text, font=font(size)) <= width:
        return text
    while text and draw.textlength(text + "…", font=font(size)) > width:
        text = text[:-1]
    return text + "…"


def _draw_text(draw: ImageDraw.ImageDraw, view: View, text: str, ink: str, inset: float = 24) -> None:
    left, top, right, bottom = view.bounds
    left += view.indent
    inset = round(inset)
    f = font(view.size)
    text = _fit(draw, text, view.size, right - left - 2 * inset)
    width = draw.textlength(text, font=f)
    if view.align == "center":
        x = left + (right - left - width) / 2
    elif view.align == "right":
        x = right - inset - width
    else:
        x = left + inset
    y = top + (bottom - top - view.size) / 2
    draw.text((x, y), text, fill=ink, font=f)


def _draw_switch(draw: ImageDraw.ImageDraw, view: View, scale: float) -> None:
    _, top, right, bottom = view.bounds
    cy = (top + bottom) // 2
    d = [round(v * scale) for v in (150, 40, 24, 30)]
    track = (right - d[0], cy - d[2], right - d[1], cy + d[2])
    on = bool(view.checked)
    draw.rounded_rectangle(track, radius=d[2], fill="#8ab4f8" if on else "#bdc1c6")
    knob_x = track[2] - d[2] if on else track[0] + d[2]
    draw.ellipse(
        (knob_x - d[3], cy - d[3], knob_x + d[3], cy + d[3]),
        fill=ACCENT if on else "#f1f3f4",
        outline="#9aa0a6",
    )


def _draw_icon(draw: ImageDraw.ImageDraw, view: View) -> None:
    left, top, right, bottom = view.bounds
    side = min(right - left, bottom - top) - 16
    cx, cy = (left + right) // 2, (top + bottom) // 2
    box = (cx - side // 2, cy - side // 2, cx + side // 2, cy + side // 2)
    draw.rounded_rectangle(box, radius=side // 4, fill=view.fill or ACCENT)
    glyph = view.glyph or (view.text[:1] or view.desc[:1]).upper()
    f = font(max(side // 2, 12))
    width = draw.textlength(glyph, font=f)
    draw.text((cx - width / 2, cy - side / 4 - 4), glyph, fill="white", font=f)


def draw_view(draw: ImageDraw.ImageDraw, view: View, scale: float = 1.0) -> None:
    """``scale``: the UI scale (display density over the physical one) of insets, strokes, knobs."""
    left, top, right, bottom = view.bounds
    kind = view.kind
    k = scale
    if kind == "icon":
        _draw_icon(draw, view)
    elif kind in ("button", "key"):
        fill = view.fill or (ACCENT if kind == "button" else "#ffffff")
        m = round(6 * k)
        draw.rounded_rectangle(
            (left + m, top + m, right - m, bottom - m), radius=round(20 * k), fill=fill, outline="#dadce0"
        )
        ink = "white" if kind == "button" and view.fill is None else view.ink
        _draw_text(draw, view, view.text or view.glyph, ink, inset=12 * k)
    elif kind == "edit":
        _draw_edit(draw, view, k)
    else:
        if view.fill:
            draw.rectangle((left, top, right - 1, bottom - 1), fill=view.fill)
        if view.selected:
            draw.rectangle((left, top, right - 1, bottom - 1), fill="#e8f0fe")
        if kind == "slider":
            _draw_slider(draw, view, k)
        elif view.text:
            _draw_text(
                draw,
                view,
                view.text,
                view.ink,
                inset=(48 if kind in ("row", "switch", "checkbox") else 24) * k,
            )
        if view.checked is not None and kind in ("switch", "checkbox"):
            if kind == "switch":
                _draw_switch(draw, view, k)
            else:
                _draw_checkbox(draw, view, k)
    for child in view.children:
        draw_view(draw, child, scale)


def _draw_edit(draw: ImageDraw.ImageDraw, view: View, k: float) -> None:
    """A text field: its box (accented while focused), the text (dots for a password) or the hint."""
    left, top, right, bottom = view.bounds
    draw.rounded_rectangle(
        (left + round(16 * k), top + round(8 * k), right - round(16 * k), bottom - round(8 * k)),
        radius=round(12 * k),
        fill=view.fill or "#ffffff",
        outline=ACCENT if view.focused else "#9aa0a6",
        width=round((4 if view.focused else 2) * k),
    )
    shown = "•" * len(view.text) if view.password else view.text
    if shown:
        _draw_text(draw, view, shown + ("|" if view.focused else ""), view.ink, inset=40 * k)
    else:
        _draw_text(draw, view, view.hint or ("|" if view.focused else ""), "#80868b", inset=40 * k)


def _draw_slider(draw: ImageDraw.ImageDraw, view: View, k: float) -> None:
    """A 0-255 slider: the track, the filled part and the knob."""
    left, top, right, bottom = view.bounds
    cy = (top + bottom) // 2
    value = int(view.text or 0)
    margin, knob = slider_margin(k), round(24 * k)
    x = left + margin + (right - left - 2 * margin) * value // 255
    draw.line((left + margin, cy, right - margin, cy), fill="#bdc1c6", width=round(10 * k))
    draw.line((left + margin, cy, x, cy), fill=ACCENT, width=round(10 * k))
    draw.ellipse((x - knob, cy - knob, x + knob, cy + knob), fill=ACCENT)


def _draw_checkbox(draw: ImageDraw.ImageDraw, view: View, k: float) -> None:
    _, top, right, bottom = view.bounds
    cy = (top + bottom) // 2
    box = (right - round(110 * k), cy - round(30 * k), right - round(50 * k), cy + round(30 * k))
    draw.rounded_rectangle(
        box, radius=round(8 * k), outline=ACCENT, width=round(5 * k), fill=ACCENT if view.checked else None
    )


def slider_margin(scale: float) -> int:
    """Where a slider's track starts and ends, from the view's edges (what a tap on it maps from)."""
    return round(40 * scale)


def render(root: View, size: tuple[int, int], background: str = "#ffffff", scale: float = 1.0) -> Image.Image:
    image = Image.new("RGB", size, background)
    draw_view(ImageDraw.Draw(image), root, scale)
    return image


# View fields that never change a pixel: handlers, the edit model behind a text view, the children
# (which get their own signature). Every other field is part of a frame's signature, so a field added
# later makes frames differ rather than look alike.
_NOT_DRAWN = frozenset({"on_tap", "on_tap_at", "on_long_press", "on_scroll", "children", "text_field"})
_DRAWN = tuple(f.name for f in dataclasses.fields(View) if f.name not in _NOT_DRAWN)


def signature(root: View) -> tuple[object, ...]:
    """Everything about a view tree that rendering reads: equal signatures give equal frames."""
    return (tuple(getattr(root, name) for name in _DRAWN), tuple(signature(c) for c in root.children))


def encode_png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    # Fast zlib level: screenshots are taken every step, and level 1 is ~5x faster than 6.
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def photo(size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A photo-like picture for the home screen's wallpaper: broad colour fields with finer
    detail over them. Its PNG is 2-3 MB at 1080x2400, as a real phone's screenshot over a photo
    is (flat app screens are ~100 KB), so that screenshot paths can be measured at real sizes."""
    rng = random.Random(seed)
    width, height = size
    coarse = Image.frombytes("RGB", (3, 6), rng.randbytes(3 * 6 * 3))
    cells = (max(1, width // 24), max(1, height // 24))
    fine = Image.frombytes("RGB", cells, rng.randbytes(cells[0] * cells[1] * 3))
    resize = Image.Resampling.BICUBIC
    return Image.blend(coarse.resize(size, resize), fine.resize(size, resize), 0.3)


def with_wallpaper(frame: Image.Image, background: str, wallpaper: Image.Image) -> Image.Image:
    """The frame with ``wallpaper`` wherever it shows the plain background colour."""
    plain = ImageChops.difference(frame, Image.new("RGB", frame.size, background)).convert("L")
    mask = plain.point(lambda v: 255 if v == 0 else 0)
    return Image.composite(wallpaper, frame, mask)
