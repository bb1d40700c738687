"""Built artefacts kept between runs (models, checkpoints): each is built in a staging folder beside
its final place and moved there in one rename, so a reader never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path


def publish(built: Path, target: Path, marker: str) -> None:
    """Move the finished ``built`` folder to ``target`` in one rename. When another builder got
    there first (``target / marker`` exists), its copy is kept and this one dropped by the caller."""
    try:
        os.rename(built, target)
    except OSError:
        if not (target / marker).is_file():  # not a concurrent builder's finished copy
            raise
