"""DESIGN.md's dependency rules, read from every import in the source (function-level ones too).

Packages: ``devices`` <- ``agent`` <- {``serve``, ``train``}; ``serve`` never imports ``train`` (the API
process stays free of torch) and ``train`` never imports ``serve``. Inside ``serve``, the wings
import downward: ``ops`` and ``db`` at the bottom, then ``models``, then ``tasks``; ``api`` is the
HTTP surface over them and the assembled service; the command lines and the demos sit on top and
nothing imports them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("devices", "agent", "serve", "train")

# What each part may not import (a part: a package, or a wing of serve).
FORBIDDEN = {
    "devices": {"agent", "serve", "train"},
    "agent": {"serve", "train"},
    "train": {"serve"},
    "serve": {"train"},
    "serve.ops": {"serve.models", "serve.tasks", "serve.api", "serve.service", "serve.cli", "serve.demo"},
    "serve.db": {"serve.ops", "serve.models", "serve.tasks", "serve.api", "serve.service", "serve.cli"},
    "serve.models": {"serve.tasks", "serve.api", "serve.service", "serve.cli", "serve.demo"},
    "serve.tasks": {"serve.api", "serve.service", "serve.cli", "serve.demo"},
    "serve.settings": {"serve.api", "serve.service", "serve.cli", "serve.demo"},
    "serve.service": {"serve.cli", "serve.demo"},
    "serve.api": {"serve.cli", "serve.demo"},
    "serve.cli": set(),
    "serve.demo": {"serve.cli"},
}


def _part(module: str) -> str:
    """The package, or for serve the wing (``serve.tasks``) or top-level module (``serve.service``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "serve" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            if node.module == "serve":  # ``from serve import db``
                yield from (f"serve.{alias.name}" for alias in node.names)


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            yield ".".join(path.relative_to(REPO).with_suffix("").parts), path


def test_every_module_belongs_to_a_part_with_rules() -> None:
    """A new wing of serve, or a module dropped beside the wings, must be placed in the rules."""
    loose = sorted(
        module
        for module, _ in _modules()
        if module.startswith("serve.")
        and _part(module) not in FORBIDDEN
        and _part(module) != "serve.__init__"
        and not module.startswith("serve.migrations")
    )
    assert not loose, f"modules of serve outside a wing named in the rules: {loose}"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_only_point_the_way_the_design_says(package: str) -> None:
    broken = []
    for module, path in _modules():
        if not module.startswith(package):
            continue
        mine = _part(module)
        for imported in _imports(path):
            if imported.split(".")[0] not in PACKAGES:
                continue
            theirs = _part(imported)
            if theirs in FORBIDDEN.get(mine, set()) or imported.split(".")[0] in FORBIDDEN.get(
                module.split(".")[0], set()
            ):
                broken.append(f"{module} imports {imported}")
    assert not broken, "\n".join(broken)
