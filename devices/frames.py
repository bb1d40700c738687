"""Screen frames as ``screencap`` writes them: a PNG read without decoding it (its size from the
header, its completeness from the IEND chunk), the cheap test of whether it could be all black,
and the raw RGBA frame of ``screencap`` without ``-p``."""

from __future__ import annotations

import io
import struct

from PIL import Image

from devices.base import DeviceError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the IEND chunk: every complete PNG ends with it


def maybe_black(png: bytes, width: int, height: int) -> bool:
    """Whether a PNG could be an all-black frame, from its size alone. Deflate packs a frame of one
    colour at least 45:1 per pixel (1080x2400 RGBA, measured: zlib level 1 without PNG filters
    56.8 KB, a byte per 46 pixels; Pillow at level 1 50.6 KB; level 6, what phones use, 15.6 KB),
    so an all-black PNG is under a byte per 40 pixels. Only frames that small are decoded and
    checked; app screens (a byte per 28-32 pixels for the simulator's flat ones, about a byte per
    pixel for photos, video and maps on real phones) cannot be black and are not decoded. A PNG
    stored without compression (3 bytes a pixel or more) is checked as well."""
    pixels = width * height
    return len(png) < pixels // 40 or len(png) >= 3 * pixels


def check_png(serial: str, data: bytes, warnings: str) -> tuple[bytes, str, tuple[int, int]]:
    """The PNG in ``screencap -p``'s output, its warnings and its size, read from its header;
    a PNG that does not end (a transfer cut short) is an error. Nothing is decoded."""
    start = data.find(PNG_MAGIC)
    if start < 0:
        raise DeviceError(
            serial, f"screencap returned no PNG ({len(data)} bytes; {warnings or 'no message'})"
        )
    if start > 0:  # a warning printed into stdout before the image (old devices, no shell v2)
        warnings = (warnings + " " + data[:start].decode("utf-8", "replace")).strip()
        data = data[start:]
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise DeviceError(serial, f"screencap returned a broken PNG ({len(data)} bytes, no header)")
    if not data.endswith(PNG_END):
        raise DeviceError(serial, f"screencap returned a broken PNG ({len(data)} bytes, no end)")
    width, height = struct.unpack(">II", data[16:24])
    return data, warnings, (width, height)


def is_black(image: Image.Image) -> bool:
    return image.getbbox() is None  # every pixel zero


def decode_and_check(serial: str, data: bytes) -> tuple[Image.Image, bool]:
    """The decoded PNG and whether it is all black."""
    image = decode_png(serial, data)
    return image, is_black(image)


def decode_png(serial: str, data: bytes) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as exc:
        raise DeviceError(serial, f"screencap returned a broken PNG: {exc}") from exc
    return image if image.mode == "RGB" else image.convert("RGB")


def decode_raw(serial: str, data: bytes, warnings: str) -> tuple[Image.Image, bytes, str, bool]:
    """A raw frame: width, height, format (and, from Android 9, colour space) as little-endian
    uint32, then RGBA_8888 pixels; any text before it is a warning. Returns the image, its PNG
    (for the store), the warnings and whether it is all black."""
    for offset in range(min(len(data), 4096)):  # skip a warning line printed into stdout
        if len(data) - offset < 12:
            break
        width, height, fmt = struct.unpack_from("<3I", data, offset)
        pixels = width * height * 4
        header = len(data) - offset - pixels
        if fmt == 1 and 0 < width <= 10000 and 0 < height <= 10000 and header in (12, 16):
            if offset:
                warnings = (warnings + " " + data[:offset].decode("utf-8", "replace")).strip()
            body = data[offset + header :]
            image = Image.frombuffer("RGBA", (width, height), body, "raw", "RGBA", 0, 1).convert("RGB")
            out = io.BytesIO()
            image.save(out, format="PNG", compress_level=1)
            return image, out.getvalue(), warnings, is_black(image)
    raise DeviceError(
        serial,
        f"screencap returned no RGBA_8888 frame ({len(data)} bytes; {warnings or 'no message'}); "
        "use capture='png' for this device",
    )
