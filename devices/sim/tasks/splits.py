"""Held-out instances that really differ from the trained ones.

An instance of a task is a seed: it fixes the task's parameters (the name to type, the file to
star) and, under a shuffling display profile, the order of every list and Settings page. Two seeds
can still give the same instance (the same goal, the same expert actions on the same screens), and
then "held out" measures recall. So instances are split by their **signature**: the goal and the
expert's actions, each tap a position on the screen. A held-out instance's signature is one that
no trained instance has: a model must see something it was not trained on (the target elsewhere,
another name in the goal) to act right.

Which signatures are held out is fixed per task and display profile: the distinct signatures of
the first ``ENUMERATED`` seeds, sorted, every ``EVERY``-th held out (so a task with a dozen
signatures holds out three, one with two or three holds out one); a signature outside them (a rare
seed) by its hash, in the same proportion. Every split the project uses (the learning benchmark, the nights benchmark, the demo,
the retraining gate) draws seeds through ``seeds``.

What varies per family under the ``learnable`` profile (``VARIES``): see its entries.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Literal

from devices.sim.display import profile
from devices.sim.phone import SimPhone
from devices.sim.tasks.registry import TASKS

Side = Literal["trained", "held_out"]
ENUMERATED = 400  # seeds whose signatures fix a task's held-out set
EVERY = 4  # one distinct signature in EVERY is held out

# What a model must perceive to act, and what differs between instances, per family judged for
# learning (the demo's, the gate's and the benchmarks'), on the ``learnable`` phone.
VARIES: dict[str, str] = {
    "wifi_on": "where Network & internet sits among six Settings rows, and the Wi-Fi switch among four",
    "wifi_off": "where Network & internet sits among six Settings rows, and the Wi-Fi switch among four",
    "airplane_mode_on": "where Network & internet sits among six Settings rows, and the switch among four",
    "bluetooth_on": "where Connected devices sits among six Settings rows, and the Bluetooth switch among three",
    "bluetooth_off": "where Connected devices sits among six Settings rows, and the Bluetooth switch among three",
    "dark_theme_on": "where Display sits among six Settings rows, and the Dark theme switch among four blocks",
    "dark_theme_off": "where Display sits among six Settings rows, and the Dark theme switch among four blocks",
    "open_app": "the app named in the goal (a held-out one is never the app of a trained instance)",
    "favorite_contact": "the contact named in the goal and where the name sits in the list",
    "add_to_cart": "the product named in the goal and where it sits in the list",
    "star_file": "the file named in the goal and where it sits in the list",
    "add_several_to_cart": "the product, the count, and where the product sits in the list",
    "star_two_files": "the pair of files and where each sits in the list",
    "enable_alarm": "which of the two alarms (7:00 or 8:30) the goal names",
    "delete_file": "the file named in the goal and where it sits in the list",
    "delete_contact": "the contact named in the goal and where the name sits in the list",
}


@cache
def signature(task: str, seed: int, display: str = "learnable") -> str:
    """The instance's goal and its expert's actions, as one JSON string."""
    instance = TASKS[task].create(seed)
    phone = SimPhone(f"split-{task}", display=profile(display))
    actions, _ = instance.run_expert(phone)
    return json.dumps([instance.goal, [a.to_dict() for a in actions]], sort_keys=True)


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@cache
def _enumerated(task: str, display: str) -> frozenset[str]:
    return frozenset(signature(task, seed, display) for seed in range(ENUMERATED))


@cache
def _held(task: str, display: str) -> frozenset[str]:
    distinct = sorted(_enumerated(task, display), key=_digest)
    # A task with fewer than EVERY signatures still holds one out (and one alone leaves no trained side).
    return frozenset(distinct[EVERY - 1 :: EVERY] or distinct[-1:])


def held_out(task: str, seed: int, display: str = "learnable") -> bool:
    """Whether the instance belongs to the held-out side of ``task``'s split."""
    sig = signature(task, seed, display)
    if sig in _enumerated(task, display):
        return sig in _held(task, display)
    return _digest(sig) % EVERY == EVERY - 1


def seeds(
    task: str,
    side: Side,
    count: int,
    *,
    start: int = 0,
    display: str = "learnable",
    exclude: frozenset[int] = frozenset(),
) -> list[int]:
    """The first ``count`` seeds from ``start`` on ``side`` of ``task``'s split (``exclude``: seeds
    not to use, e.g. another split's)."""
    want = side == "held_out"
    out: list[int] = []
    seed = start
    while len(out) < count:
        if seed not in exclude and held_out(task, seed, display) == want:
            out.append(seed)
        seed += 1
        if seed - start > 100 * count + ENUMERATED:
            raise ValueError(f"{task}: fewer than {count} {side} instances from seed {start}")
    return out
