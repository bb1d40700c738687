"""Reading a uiautomator hierarchy dump (``Device.hierarchy()``): what has the input focus.

Android's dump marks the view with the input focus ``focused="true"`` and an edit field that
hides what is typed ``password="true"``; uiautomator2's ``dump_hierarchy`` writes the same
attributes. The dump comes from the phone, so it is parsed as untrusted input: a document that
does not parse is an error, never a guess.
"""

from __future__ import annotations

from xml.etree import ElementTree

MAX_DUMP_BYTES = 8 << 20  # a busy real screen dumps to ~200 KB


class HierarchyError(ValueError):
    """The dump is not a uiautomator hierarchy."""


def focused_node(xml: str) -> dict[str, str] | None:
    """The attributes of the view that has the input focus, or None when no view has it."""
    if len(xml) > MAX_DUMP_BYTES:
        raise HierarchyError(f"hierarchy dump of {len(xml)} characters is over {MAX_DUMP_BYTES}")
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise HierarchyError(f"hierarchy dump does not parse: {exc}") from None
    if root.tag != "hierarchy":
        raise HierarchyError(f"hierarchy dump starts with <{root.tag}>, not <hierarchy>")
    # The deepest focused node: a focused container may hold the focused field.
    found = None
    for node in root.iter("node"):
        if node.get("focused") == "true":
            found = node
    return dict(found.attrib) if found is not None else None


def focused_is_password(xml: str) -> bool:
    """Whether text typed now goes into a password field."""
    node = focused_node(xml)
    return node is not None and node.get("password") == "true"
