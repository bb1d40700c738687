"""The simulated phone's screens exactly as the model receives them, and whether they are legible.

    .venv/bin/python benchmarks/screens.py                       # 128 image tokens, both display profiles
    .venv/bin/python benchmarks/screens.py --image-tokens 64 --out screens-64.png --json

For each display profile (``standard``, ``learnable``) a few screens of the learning benchmark's
tasks are taken from the phone and put through the prompt's own image path (``agent.prompt.
prepare_image``: Qwen2.5-VL's smart resize, bicubic), at the benchmark's image-token count. The
sheet shows them at exactly the resized pixels (no upscaling), one row per profile.

Legibility, measured two ways per profile: the height of list-row text in the model's pixels, and,
when Tesseract is installed (Debian's ``tesseract-ocr``), the share of list-row labels an OCR engine
reads off the resized screen: every word of an item's name (a row's content description, else its
text), a lower bound on what a model could learn to read. Without Tesseract the column says n/a.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from machine import about
from PIL import Image, ImageDraw

from agent.geometry import ResizeSettings
from agent.prompt import PromptSettings, prepare_image
from devices.sim.display import PROFILES, profile
from devices.sim.phone import SimPhone
from devices.sim.tasks import TASKS, execute
from devices.sim.ui import View

# (task, steps of its expert to run first): a screen with a list each, from the benchmark's tasks.
SCREENS = (
    ("open_app_from_home", 1),
    ("wifi_on", 1),
    ("connect_to_network", 4),
    ("add_to_cart", 1),
    ("star_two_files", 2),
    ("favorite_contact", 1),
)


def screen(profile_name: str, task_name: str, steps: int, seed: int) -> tuple[Image.Image, list[View]]:
    """The phone's frame after the first ``steps`` expert actions, and the list rows on it."""
    phone = SimPhone("screens", clock="09:41", display=profile(profile_name))
    task = TASKS[task_name].create(seed)
    task.initialize(phone)
    solver = task.solve(phone)
    for _ in range(steps):
        execute(phone, next(solver))
    rows = [v for v in phone.view().walk() if v.kind in ("row", "switch", "checkbox") and v.text]
    return Image.open(io.BytesIO(phone.screenshot_png())).convert("RGB"), rows


def ocr_words(image: Image.Image) -> set[str] | None:
    if shutil.which("tesseract") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "screen.png"
        image.save(path)
        out = subprocess.run(
            ["tesseract", str(path), "stdout", "--psm", "11"], capture_output=True, text=True, check=False
        )
    return {w.lower() for w in re.findall(r"[A-Za-z0-9]{2,}", out.stdout)}


def legible(label: str, words: set[str]) -> bool:
    wanted = [w.lower() for w in re.findall(r"[A-Za-z0-9]{2,}", label)]
    return bool(wanted) and all(w in words for w in wanted)


def measure(tokens: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, list[Image.Image]]]:
    prompt = PromptSettings(resize=ResizeSettings(max_pixels=tokens * 28 * 28))
    rows_out: list[dict[str, Any]] = []
    sheets: dict[str, list[Image.Image]] = {}
    for name in PROFILES:
        images, heights, read, labels = [], [], 0, 0
        for task, steps in SCREENS:
            frame, rows = screen(name, task, steps, seed)
            part = prepare_image(frame, prompt)
            assert part.image is not None
            scale = part.geometry.resized.height / frame.height
            heights += [v.size * scale for v in rows]
            words = ocr_words(part.image)
            if words is not None:
                for view in rows:  # the item's name (what a task refers to), not a price beside it
                    labels += 1
                    read += legible(view.desc or view.text, words)
            images.append(part.image)
        sheets[name] = images
        resized = images[0].size
        rows_out.append(
            {
                "profile": name,
                "image_tokens": tokens,
                "resized": f"{resized[0]}x{resized[1]}",
                "row_text_px": round(sum(heights) / len(heights), 1),
                "ocr_labels_read": None if labels == 0 else round(read / labels, 3),
                "ocr_labels": labels,
            }
        )
    return rows_out, sheets


def contact_sheet(sheets: dict[str, list[Image.Image]], out: Path) -> None:
    gap, label_h = 8, 24
    widths = [sum(i.width for i in images) + gap * (len(images) - 1) for images in sheets.values()]
    heights = [max(i.height for i in images) for images in sheets.values()]
    sheet = Image.new("RGB", (max(widths), sum(heights) + (label_h + gap) * len(sheets)), "white")
    draw = ImageDraw.Draw(sheet)
    y = 0
    for (name, images), height in zip(sheets.items(), heights, strict=True):
        draw.text((0, y + 4), f"{name} (as the model receives it)", fill="black")
        x, y = 0, y + label_h
        for image in images:
            sheet.paste(image, (x, y))
            x += image.width + gap
        y += height + gap
    sheet.save(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--image-tokens", type=int, default=128, help="The prompt's image budget (max_pixels / 28²)."
    )
    parser.add_argument("--seed", type=int, default=0, help="Task seed (the learnable profile's list order).")
    parser.add_argument(
        "--out", type=Path, default=Path("screens.png"), help="Where to write the sheet (PNG)."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, sheets = measure(args.image_tokens, args.seed)
    contact_sheet(sheets, args.out)
    if args.json:
        print(json.dumps({"machine": about(), "sheet": str(args.out), "profiles": rows}, indent=2))
        return
    print(f"machine: {about()}; sheet: {args.out}")
    print(f"{'profile':<10}{'tokens':>7}{'resized':>10}{'row text px':>13}{'OCR read':>10}")
    for row in rows:
        read = "n/a" if row["ocr_labels_read"] is None else f"{row['ocr_labels_read']:.0%}"
        print(
            f"{row['profile']:<10}{row['image_tokens']:>7}{row['resized']:>10}{row['row_text_px']:>13}{read:>10}"
        )


if __name__ == "__main__":
    main()
