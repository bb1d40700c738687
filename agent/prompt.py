"""The UI-S1 prompt: system prompt, multi-turn history, and its two renderings.

One conversation is built from the goal, the policy's own previous responses and the screenshots
(``build_conversation``). It renders as OpenAI-style chat messages for vLLM
(``to_openai_messages``) and as transformers chat-template input for local models
(``to_chat_template_input``); both come from the same turns, so both backends see the same prompt.

Layout (METHOD.md §1): the system prompt; a first user turn with the instruction, the output
format, the note on answering questions and screenshot 0; then, per later step, the previous raw
response as an assistant turn and a user turn with the output-format reminder and the current
screenshot. The goal is not repeated. Only the last ``image_limit`` screenshots stay as images.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from PIL import Image

from agent.actions import ACTION_TYPES
from agent.geometry import ResizeSettings, ScreenGeometry, Size

OUTPUT_FORMAT = "```\n<think> ... </think>\n\n<action> ... </action>\n```"
FORMAT_REMINDER = f"Output Format: {OUTPUT_FORMAT}"
ANSWER_NOTE = (
    "If the query asks a question, please answer the question through the answer action "
    "before terminating the process.\n"
)
# Qwen2.5-VL's end-of-turn and padding tokens. A response recorded with either (a backend that
# decodes without skipping special tokens) is cut there before it goes back into the history.
END_OF_SEQUENCE = ("<|im_end|>", "<|endoftext|>")

ACTION_DESCRIPTIONS: dict[str, str] = {
    "key": "Send an Android key event, named as adb's `keyevent` command names it.",
    "click": "Tap the screen at the given (x, y) point.",
    "long_press": "Touch and hold the given (x, y) point for the given number of seconds.",
    "swipe": "Move a finger from the start point (x, y) to the end point (x2, y2).",
    "type": "Enter the given text into the input box that has focus.",
    "answer": "Give the given text as the answer to the user's question.",
    "system_button": "Press one of the system buttons: Back, Home, Menu or Enter.",
    "open": "Launch the app whose name is given as text.",
    "wait": "Do nothing for the given number of seconds while the screen changes.",
    "terminate": "End the task and report whether it succeeded or failed.",
}
ARGUMENT_DESCRIPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "coordinate": ("(x, y): pixels from the left and the top edge of the screenshot.", ()),
    "coordinate2": ("(x, y): pixels from the left and the top edge, where a swipe ends.", ()),
    "text": ("The text that `key`, `type`, `answer` and `open` take.", ()),
    "time": ("Seconds, for `long_press` and `wait`.", ()),
    "button": ("The system button to press.", ("Back", "Home", "Menu", "Enter")),
    "status": ("How the task ended.", ("success", "failure")),
}


def _action_space_text() -> str:
    lines = ["You can perform the following actions:"]
    arguments: list[str] = []
    for action_type in ACTION_TYPES:
        name = action_type.model_fields["action"].default
        lines.append(f"- {name}: {ACTION_DESCRIPTIONS[name]}")
        arguments.extend(a for a in action_type.arguments if a not in arguments)
    lines.append("\nThe arguments you can use are:")
    for arg in sorted(arguments, key=list(ARGUMENT_DESCRIPTIONS).index):
        desc, values = ARGUMENT_DESCRIPTIONS[arg]
        suffix = f" Possible values: {', '.join(values)}." if values else ""
        lines.append(f"- {arg}: {desc}{suffix}")
    lines.append(
        "\nFormat your output as a JSON object with the selected action and its arguments at the same level."
    )
    lines.append("\nExample outputs:")
    # The first two actions of the space, with placeholder values, as the trained prompt shows them.
    for action_type in ACTION_TYPES[:2]:
        fields = ", ".join(f'"{a}": "<value>"' for a in action_type.arguments)
        lines.append(
            f'<action>\n{{"action": "{action_type.model_fields["action"].default}", {fields}}}\n</action>'
        )
    return "\n".join(lines)


SYSTEM_PROMPT = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "You need to perform the next action to complete the task. \n"
    f"## Output Format\n\n{OUTPUT_FORMAT}\n\n"
    f"## Action Space\n\n{_action_space_text()}\n\n"
    "## Note\n\n"
    "- Plan the task and explain your reasoning step by step in the `think` part.\n"
    "- Write your action in the `action` part, following the action space.\n"
)


# A short system prompt for small models trained from scratch on short contexts (the simulated
# phone's learning benchmark, the demo's starter policy): the same output format and action space
# in a tenth of the tokens. A checkpoint trained with it carries it (``agent.checkpoint``), so the
# version is served with the prompt it learned.
COMPACT_SYSTEM_PROMPT = (
    "You operate an Android phone. Output <think>...</think> then <action>{json}</action>.\n"
    "Actions: click(coordinate), long_press(coordinate,time), swipe(coordinate,coordinate2), type(text), "
    "key(text), system_button(button: Back|Home|Menu|Enter), open(text), wait(time), answer(text), "
    "terminate(status: success|failure). Coordinates are screenshot pixels [x, y]."
)
SYSTEM_PROMPTS = {"ui-s1": SYSTEM_PROMPT, "compact": COMPACT_SYSTEM_PROMPT}


def system_prompt_text(value: str) -> str:
    """A built-in system prompt by name (``ui-s1``, ``compact``), or ``value`` itself as the prompt."""
    return SYSTEM_PROMPTS.get(value, value)


@dataclass(frozen=True)
class Screenshot:
    """One observation: encoded image bytes (PNG or JPEG) and the screen size they show."""

    data: bytes
    size: Size
    mime: str = "image/png"

    @classmethod
    def from_image(cls, image: Image.Image) -> Screenshot:
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return cls(data=buf.getvalue(), size=Size(*image.size))

    def open(self) -> Image.Image:
        image = Image.open(io.BytesIO(self.data))
        image.load()
        return as_rgb(image)


def as_rgb(image: Image.Image) -> Image.Image:
    """The image in RGB; one already in RGB is used as is (``convert`` would copy it)."""
    return image if image.mode == "RGB" else image.convert("RGB")


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    """A screenshot as the model sees it: smart-resized, so every backend agrees on its size.

    Either the resized image, or (``image_transport="original"``) the PNG as captured, which the
    policy server's own processor resizes to ``geometry.resized`` (same limits, same result).
    """

    resized: Image.Image | None = field(compare=False, repr=False)
    geometry: ScreenGeometry
    original: bytes | None = field(default=None, compare=False, repr=False)
    # Encoded once per wire format: the same screen goes out again as history in the next step.
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def image(self) -> Image.Image:
        """The image in pixels: the resized one, or the original decoded (a processor resizes it)."""
        if self.resized is not None:
            return self.resized
        if "image" not in self._cache:
            self._cache["image"] = Screenshot(self.original or b"", self.geometry.device).open()
        return self._cache["image"]  # type: ignore[no-any-return]

    def data_url(self, wire_format: str) -> str:
        key = "original" if self.original is not None else wire_format
        url = self._cache.get(key)
        if url is None:
            if self.original is not None:
                url = f"data:image/png;base64,{base64.b64encode(self.original).decode('ascii')}"
            else:
                url = image_data_url(self.image, wire_format)
            self._cache[key] = url
        return str(url)


Part = TextPart | ImagePart


@dataclass(frozen=True)
class Turn:
    role: Literal["system", "user", "assistant"]
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class PromptSettings:
    system_prompt: str = SYSTEM_PROMPT
    image_limit: int = 2
    resize: ResizeSettings = field(default_factory=ResizeSettings)
    end_of_sequence: tuple[str, ...] = END_OF_SEQUENCE
    # How images travel to vLLM: PNG keeps pixels exact, JPEG is a fifth of the bytes.
    wire_format: Literal["PNG", "JPEG"] = "PNG"
    # resized: the service resizes each screenshot (exact control over what the model sees).
    # original: the captured PNG goes as is and the server's processor resizes it; no decoding,
    # resizing or encoding here, but the server's min/max pixels must equal ``resize``.
    image_transport: Literal["resized", "original"] = "resized"


def cut_at_end_of_sequence(response: str, markers: Sequence[str] = END_OF_SEQUENCE) -> str:
    """The response up to the first end-of-sequence marker (the whole text if there is none)."""
    cut = len(response)
    for marker in markers:
        at = response.find(marker)
        if 0 <= at < cut:
            cut = at
    return response[:cut]


def prepare_image(screenshot: Screenshot | Image.Image, settings: PromptSettings) -> ImagePart:
    """Decode and smart-resize one screenshot (bicubic, as the Qwen2-VL image processor does).

    With ``image_transport="original"`` a PNG screenshot is kept as captured (nothing decoded).
    """
    original = settings.image_transport == "original"
    if original and isinstance(screenshot, Screenshot) and screenshot.mime == "image/png":
        geometry = ScreenGeometry.for_screen(screenshot.size, settings.resize)
        return ImagePart(None, geometry, original=screenshot.data)
    image = screenshot.open() if isinstance(screenshot, Screenshot) else as_rgb(screenshot)
    geometry = ScreenGeometry.for_screen(Size(*image.size), settings.resize)
    if Size(*image.size) != geometry.resized:
        image = image.resize(geometry.resized, Image.Resampling.BICUBIC)
    return ImagePart(image, geometry)


def build_conversation(
    goal: str,
    screenshots: Sequence[Screenshot | Image.Image | ImagePart | None],
    history: Sequence[str],
    settings: PromptSettings | None = None,
) -> list[Turn]:
    """The dialogue for the next step: ``len(screenshots) == len(history) + 1``.

    ``history[i]`` is the raw response given at step ``i`` (or the patch text that replaced it);
    ``screenshots[i]`` is the observation of step ``i``, the last one being the current screen.
    Screens older than the last ``image_limit`` are not shown, so a caller may drop them (None).
    """
    s = settings or PromptSettings()
    if len(screenshots) != len(history) + 1:
        raise ValueError(
            f"need one screenshot more than responses, got {len(screenshots)} and {len(history)}"
        )
    if s.image_limit < 1:
        raise ValueError("image_limit must be at least 1: the current screen is always shown")
    first_kept = len(screenshots) - s.image_limit
    turns = [Turn("system", (TextPart(s.system_prompt),))]
    for step, shot in enumerate(screenshots):
        if step > 0:
            turns.append(
                Turn("assistant", (TextPart(cut_at_end_of_sequence(history[step - 1], s.end_of_sequence)),))
            )
        parts: list[Part] = []
        if step == 0:
            parts.append(TextPart(f"User Instruction: {goal}\n{FORMAT_REMINDER}"))
            parts.append(TextPart(ANSWER_NOTE))
        else:
            parts.append(TextPart(FORMAT_REMINDER))
        if step >= first_kept:
            if shot is None:
                raise ValueError(
                    f"screenshot {step} was dropped, but the prompt shows the last {s.image_limit}"
                )
            parts.append(shot if isinstance(shot, ImagePart) else prepare_image(shot, s))
        turns.append(Turn("user", tuple(parts)))
    return turns


def current_geometry(turns: Sequence[Turn]) -> ScreenGeometry:
    """The geometry of the last image: the screen the next action refers to."""
    for turn in reversed(turns):
        for part in reversed(turn.parts):
            if isinstance(part, ImagePart):
                return part.geometry
    raise ValueError("the conversation has no image")


def image_data_url(image: Image.Image, wire_format: str = "PNG") -> str:
    """The image inline, as an OpenAI-style ``data:`` URL."""
    buf = io.BytesIO()
    # PNG is lossless at any level; level 1 encodes several times faster than the default 6.
    image.save(
        buf, format=wire_format, **({"quality": 90} if wire_format == "JPEG" else {"compress_level": 1})
    )
    mime = "image/png" if wire_format == "PNG" else "image/jpeg"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def to_openai_messages(turns: Sequence[Turn], settings: PromptSettings | None = None) -> list[dict[str, Any]]:
    """Chat messages for an OpenAI-compatible server (vLLM), images inline as data URLs."""
    s = settings or PromptSettings()
    messages: list[dict[str, Any]] = []
    for turn in turns:
        content: list[dict[str, Any]] = []
        for part in turn.parts:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            else:
                content.append({"type": "image_url", "image_url": {"url": part.data_url(s.wire_format)}})
        messages.append({"role": turn.role, "content": content})
    return messages


def to_chat_template_input(turns: Sequence[Turn]) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """Messages for ``processor.apply_chat_template`` and the images in the order they appear."""
    messages: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    for turn in turns:
        content: list[dict[str, Any]] = []
        for part in turn.parts:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            else:
                content.append({"type": "image"})
                images.append(part.image)
        messages.append({"role": turn.role, "content": content})
    return messages, images
