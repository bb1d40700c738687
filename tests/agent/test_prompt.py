from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from agent.actions import Click
from agent.geometry import ResizeSettings, Size
from agent.parsing import format_response
from agent.prompt import (
    ANSWER_NOTE,
    FORMAT_REMINDER,
    SYSTEM_PROMPT,
    ImagePart,
    PromptSettings,
    Screenshot,
    TextPart,
    build_conversation,
    current_geometry,
    cut_at_end_of_sequence,
    to_chat_template_input,
    to_openai_messages,
)

SMALL = PromptSettings(resize=ResizeSettings(max_pixels=64 * 28 * 28))


def screen(shade: int, size: tuple[int, int] = (360, 800)) -> Screenshot:
    return Screenshot.from_image(Image.new("RGB", size, (shade, shade, shade)))


def shades(turns: list) -> list[int]:  # type: ignore[type-arg]
    return [p.image.getpixel((0, 0))[0] for t in turns for p in t.parts if isinstance(p, ImagePart)]


def test_system_prompt_pins_the_trained_strings() -> None:
    assert SYSTEM_PROMPT.startswith(
        "You are a GUI agent. You are given a task and your action history, with screenshots. "
        "You need to perform the next action to complete the task. \n## Output Format\n\n"
        "```\n<think> ... </think>\n\n<action> ... </action>\n```\n\n## Action Space\n\n"
        "You can perform the following actions:\n- key: "
    )
    for name in (
        "key",
        "click",
        "long_press",
        "swipe",
        "type",
        "answer",
        "system_button",
        "open",
        "wait",
        "terminate",
    ):
        assert f"\n- {name}: " in SYSTEM_PROMPT
    assert "- button: The system button to press. Possible values: Back, Home, Menu, Enter." in SYSTEM_PROMPT
    assert "- status: How the task ended. Possible values: success, failure." in SYSTEM_PROMPT
    assert (
        'Example outputs:\n<action>\n{"action": "key", "text": "<value>"}\n</action>\n'
        '<action>\n{"action": "click", "coordinate": "<value>"}\n</action>\n\n## Note'
    ) in SYSTEM_PROMPT
    assert FORMAT_REMINDER == "Output Format: ```\n<think> ... </think>\n\n<action> ... </action>\n```"
    assert ANSWER_NOTE == (
        "If the query asks a question, please answer the question through the answer action "
        "before terminating the process.\n"
    )


def test_first_turn_carries_goal_format_note_and_screenshot() -> None:
    turns = build_conversation("Turn on Wi-Fi", [screen(10)], [], SMALL)
    assert [t.role for t in turns] == ["system", "user"]
    assert turns[0].parts == (TextPart(SYSTEM_PROMPT),)
    user = turns[1].parts
    assert user[0] == TextPart(f"User Instruction: Turn on Wi-Fi\n{FORMAT_REMINDER}")
    assert user[1] == TextPart(ANSWER_NOTE)
    assert isinstance(user[2], ImagePart)


def test_later_turns_hold_own_responses_and_only_the_last_two_images() -> None:
    responses = [format_response(Click(coordinate=(i, i)), f"step {i}") for i in range(3)]
    turns = build_conversation("Reply to Anna", [screen(s) for s in (10, 20, 30, 40)], responses, SMALL)
    assert [t.role for t in turns] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [t.parts[0] for t in turns if t.role == "assistant"] == [TextPart(r) for r in responses]
    # The goal appears once; later user turns are the reminder (+ image when kept).
    texts = [p.text for t in turns for p in t.parts if isinstance(p, TextPart)]
    assert sum("Reply to Anna" in t for t in texts) == 1
    assert turns[3].parts == (TextPart(FORMAT_REMINDER),)
    assert turns[5].parts[0] == TextPart(FORMAT_REMINDER)
    assert shades(turns) == [30, 40]


def test_image_limit_is_configurable() -> None:
    settings = PromptSettings(image_limit=3, resize=SMALL.resize)
    turns = build_conversation("g", [screen(s) for s in (10, 20, 30, 40)], ["a", "b", "c"], settings)
    assert shades(turns) == [20, 30, 40]
    with pytest.raises(ValueError, match="one screenshot more"):
        build_conversation("g", [screen(1)], ["a"], SMALL)


def test_history_is_cut_at_the_first_end_of_sequence_token() -> None:
    leaked = (
        '<think>x</think><action>{"action": "wait", "time": 2}</action><|im_end|><|endoftext|><|endoftext|>'
    )
    turns = build_conversation("g", [screen(1), screen(2)], [leaked], SMALL)
    assert turns[2].parts == (TextPart('<think>x</think><action>{"action": "wait", "time": 2}</action>'),)
    assert cut_at_end_of_sequence("abc<|endoftext|>d<|im_end|>") == "abc"
    assert cut_at_end_of_sequence("no marker") == "no marker"


def test_images_are_smart_resized_and_geometry_is_recorded() -> None:
    turns = build_conversation("g", [screen(5, (1080, 2400))], [], PromptSettings())
    part = turns[1].parts[2]
    assert isinstance(part, ImagePart)
    assert part.image.size == (1092, 2408)
    geometry = current_geometry(turns)
    assert geometry.device == Size(1080, 2400)
    assert geometry.to_device((546, 1204)) == (540, 1200)


def test_openai_rendering() -> None:
    turns = build_conversation(
        "Open Clock", [screen(1), screen(2)], ["<think>\n\n</think>\n<action>\nx\n</action>"], SMALL
    )
    messages = to_openai_messages(turns, SMALL)
    assert messages[0] == {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]}
    assert messages[1]["content"][0] == {
        "type": "text",
        "text": f"User Instruction: Open Clock\n{FORMAT_REMINDER}",
    }
    url = messages[1]["content"][2]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (140, 308)  # 360x800 under a 64-token budget
    assert messages[2] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "<think>\n\n</think>\n<action>\nx\n</action>"}],
    }
    jpeg = to_openai_messages(turns, PromptSettings(wire_format="JPEG", resize=SMALL.resize))
    assert jpeg[1]["content"][2]["image_url"]["url"].startswith("data:image/jpeg;base64,")


def test_both_renderings_give_the_same_prompt_through_the_chat_template(tiny_model_dir) -> None:  # type: ignore[no-untyped-def]
    from agent.checkpoint import load_processor

    processor = load_processor(tiny_model_dir, SMALL.resize)
    turns = build_conversation("Open Clock", [screen(1), screen(2), screen(3)], ["r1<|im_end|>", "r2"], SMALL)
    messages, images = to_chat_template_input(turns)
    local = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    remote = processor.tokenizer.apply_chat_template(
        to_openai_messages(turns, SMALL), add_generation_prompt=True, tokenize=False
    )
    assert local == remote
    assert local.count("<|vision_start|><|image_pad|><|vision_end|>") == 2 == len(images)
    assert local.endswith("<|im_start|>assistant\n")
    assert "User Instruction: Open Clock" in local
    assert "r1<|im_end|>" in local
    assert "r1<|im_end|><|im_end|>" not in local
    # The processor keeps the size the prompt chose: grid = resized size / 14.
    inputs = processor(text=[local], images=images, return_tensors="pt")
    assert inputs["image_grid_thw"].tolist() == [[1, 22, 10], [1, 22, 10]]
