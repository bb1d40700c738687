"""Loading a Qwen2.5-VL checkpoint (UI-S1-7B, a fine-tune, or the tiny test model) with transformers.

One code path for every checkpoint directory: ``load_processor`` and ``load_model``. The processor
is told the project's resize settings, so the image it builds has exactly the size that
``agent.geometry`` computed and coordinates map back correctly.

Hosts without torchvision (CPU machines where only a CUDA torchvision build is on offer) cannot
build the stock ``Qwen2_5_VLProcessor``: its video processor needs torchvision. There we build an
image-only processor from the same tokenizer and image processor; images behave identically and
video is not needed by a phone agent.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.geometry import ResizeSettings

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# Tokens a randomly initialised (or badly drifted) model may sample that would break the next
# forward pass: an ``<|image_pad|>`` in a response makes image features and tokens disagree.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")


def torchvision_usable() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # a CUDA-only build fails at import on CPU hosts
        log.info("torchvision is installed but unusable (%s); using the image-only processor", exc)
        return False
    return True


def _image_only_processor_class() -> type[Any]:
    from transformers import ProcessorMixin, Qwen2_5_VLProcessor

    class Qwen25VLImageOnlyProcessor(Qwen2_5_VLProcessor):
        """``Qwen2_5_VLProcessor`` without the (torchvision-only) video processor."""

        def __init__(
            self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None
        ) -> None:
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return Qwen25VLImageOnlyProcessor


def apply_resize(image_processor: Any, resize: ResizeSettings) -> None:
    """Make the image processor resize exactly as ``agent.geometry.smart_resize`` does."""
    image_processor.size = {"shortest_edge": resize.min_pixels, "longest_edge": resize.max_pixels}
    patch = getattr(image_processor, "patch_size", 14)
    merge = getattr(image_processor, "merge_size", 2)
    if patch * merge != resize.factor:
        raise ValueError(f"checkpoint resizes by {patch * merge} px, the settings say {resize.factor}")


def require_checkpoint(path: str | Path) -> None:
    """A path that names a folder on this machine must be one (transformers would take it for a
    hub id and fail with a message about repository names); ``org/name`` is left to transformers."""
    text = str(path)
    looks_local = Path(text).is_absolute() or text.startswith((".", "~")) or text.count("/") > 1
    if looks_local and not Path(text).expanduser().is_dir():
        raise FileNotFoundError(f"no checkpoint folder at {text} (a model saved with save_pretrained)")


def load_processor(path: str | Path, resize: ResizeSettings | None = None) -> Any:
    """The processor (tokenizer + image processor + chat template) of a checkpoint directory."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    require_checkpoint(path)
    resize = resize or ResizeSettings()
    path = str(path)
    if torchvision_usable():
        processor = AutoProcessor.from_pretrained(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
        image_processor = AutoImageProcessor.from_pretrained(path)
        processor = _image_only_processor_class()(
            image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template
        )
    if not hasattr(processor, "image_processor"):
        raise ValueError(f"{path} has no image processor: is it a Qwen2.5-VL checkpoint?")
    apply_resize(processor.image_processor, resize)
    return processor


def load_model(path: str | Path, *, dtype: str = "auto", device: str = "cpu") -> Any:
    """A ``Qwen2_5_VLForConditionalGeneration`` in eval mode, on ``device``."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    require_checkpoint(path)
    torch_dtype: torch.dtype | str = dtype if dtype == "auto" else getattr(torch, dtype)
    model_class: Any = Qwen2_5_VLForConditionalGeneration
    model = model_class.from_pretrained(str(path), dtype=torch_dtype)
    model.to(device)
    model.eval()
    return model


# The system prompt a checkpoint was trained with, beside its weights (absent: UI-S1's own).
PROMPT_FILE = "system_prompt.txt"


def read_system_prompt(path: str | Path) -> str | None:
    """The system prompt saved with a checkpoint (or its adapter's directory), if any."""
    file = Path(path) / PROMPT_FILE
    return file.read_text(encoding="utf-8") if file.is_file() else None


def write_system_prompt(path: str | Path, text: str) -> None:
    (Path(path) / PROMPT_FILE).write_text(text, encoding="utf-8")


def saved_system_prompt(model_dir: str | Path | None, adapter_dir: str | Path | None = None) -> str | None:
    """The system prompt saved beside a checkpoint: its adapter's, else its model's (None: neither)."""
    for where in (adapter_dir, model_dir):
        if where and (text := read_system_prompt(where)) is not None:
            return text
    return None


def checkpoint_system_prompt(model_dir: str | Path, adapter_dir: str | Path | None = None) -> str:
    """The system prompt to run a checkpoint with: its adapter's, else its model's, else UI-S1's."""
    from agent.prompt import SYSTEM_PROMPT

    text = saved_system_prompt(model_dir, adapter_dir)
    return SYSTEM_PROMPT if text is None else text


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the vision tokens, to suppress in generation."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS]
    return [i for i in ids if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id]
