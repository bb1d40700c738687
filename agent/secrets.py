"""Text typed into a password field reaches the phone and is kept nowhere else.

Before a ``type`` action runs, the episode loop asks the phone whether the focused field is a
password (its UI hierarchy marks such fields ``password="true"``). When it is, or when the phone
cannot say, the step is recorded with the text masked: the action, the action as executed, a
person's label, the raw response and the thought all carry ``MASK`` where the text was, and the
step's ``extra["secret"]`` says that a secret of that many characters was typed. Everything that
keeps or shows a step (the store, the event stream, the logs, the viewer, exports, curation) only
ever sees that record; the unmasked action lives in the loop for the time it takes to perform it.
"""

from __future__ import annotations

import json
from typing import Any

from agent.actions import Action, Type
from agent.parsing import format_response
from agent.trajectory import ActionLabel, Step
from devices.base import Device
from devices.hierarchy import focused_is_password

MASK = "[secret]"
SHORT = 4  # a secret shorter than this is not searched for in free text (see ``redact``)

# The step fields that may quote what the policy typed.
_TEXT_FIELDS = ("raw_response", "thought", "motivation", "action_description", "step_instruction")


def typed_text(action: Action | None) -> str | None:
    """The text ``action`` types, or None for an action that types nothing."""
    return action.text if isinstance(action, Type) else None


async def focus_of(device: Device) -> str:
    """What the phone says of its focused field: "password", "other", or why it cannot tell."""
    try:
        return "password" if focused_is_password(await device.hierarchy()) else "other"
    except Exception as exc:  # any failure to tell counts as a password field: nothing is kept
        return f"cannot tell ({type(exc).__name__}: {exc})"[:200]


def mask_in(text: str | None, secret: str) -> str | None:
    """``text`` with every occurrence of ``secret`` replaced by ``MASK``."""
    if text is None or not secret:
        return text
    escaped = json.dumps(secret)[1:-1]  # as a JSON response writes it (quotes, backslashes, \uXXXX)
    return text.replace(secret, MASK).replace(escaped, MASK)


def _masked_action(action: Action | None) -> Action | None:
    return Type(text=MASK) if isinstance(action, Type) else action


def public_action(action: Action) -> dict[str, Any]:
    """``action`` as an event may carry it before the phone was asked about its focus: typed
    text is never in it."""
    return (_masked_action(action) or action).to_dict()


def _masked_label(label: ActionLabel | None) -> ActionLabel | None:
    if label is None or label.action != "type":
        return label
    return label.model_copy(update={"text": MASK})


def redact(step: Step, secret: str, *, focus: str) -> Step:
    """``step`` as it may be kept: ``secret`` (what it types) masked wherever the step holds it.

    ``focus`` is what the phone said of the focused field ("password", or why it could not tell)."""
    if len(secret) < SHORT:
        # A PIN of a few characters also occurs inside ordinary words and numbers: masking it there
        # would garble the text, so the texts are dropped and the response is the masked action.
        update: dict[str, Any] = dict.fromkeys(_TEXT_FIELDS)
        if step.raw_response is not None:
            update["raw_response"] = format_response(Type(text=MASK))
    else:
        update = {name: mask_in(getattr(step, name), secret) for name in _TEXT_FIELDS}
    update |= {
        "action": _masked_action(step.action),
        "device_action": _masked_action(step.device_action),
        "expert": _masked_label(step.expert),
        "extra": {**step.extra, "secret": {"length": len(secret), "focus": focus}},
    }
    return step.model_copy(update=update)
