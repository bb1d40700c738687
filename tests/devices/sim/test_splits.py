"""Instances that really differ: Settings rows move with the seed, and the two sides of a task's
split never share a goal and expert actions."""

from __future__ import annotations

import pytest

from devices.sim.display import LEARNABLE, STANDARD
from devices.sim.phone import SimPhone
from devices.sim.tasks import TASKS, splits


def _settings_rows(seed: int, display=LEARNABLE) -> list[str]:  # type: ignore[no-untyped-def]
    phone = SimPhone("t", display=display)
    TASKS["wifi_on"].create(seed).initialize(phone)
    phone.start("com.android.settings")
    rows = [v for v in phone.view().walk() if v.kind == "row"]
    return [r.text for r in sorted(rows, key=lambda r: r.bounds[1])]


def test_settings_rows_are_ordered_by_the_task_seed_under_the_learnable_profile_only() -> None:
    orders = {tuple(_settings_rows(seed)) for seed in range(12)}
    assert len(orders) > 6
    assert {row for order in orders for row in order} >= {
        "Network & internet",
        "Display",
        "Connected devices",
    }
    assert _settings_rows(3) == _settings_rows(3)  # one seed, one order
    standard = {tuple(_settings_rows(seed, STANDARD)) for seed in range(4)}
    assert standard == {
        ("Network & internet", "Connected devices", "Display", "About phone", "Apps", "Battery")
    }


@pytest.mark.parametrize("family", sorted(splits.VARIES))
def test_the_sides_of_every_family_split_share_no_instance(family: str) -> None:
    held = splits.seeds(family, "held_out", 6)
    trained = splits.seeds(family, "trained", 30)
    assert not set(held) & set(trained)
    held_sigs = {splits.signature(family, s) for s in held}
    trained_sigs = {splits.signature(family, s) for s in trained}
    assert not held_sigs & trained_sigs
    # Seeds past the enumerated range are classified by their signature too.
    far = splits.seeds(family, "held_out", 2, start=50_000)
    assert all(splits.signature(family, s) not in trained_sigs for s in far)


@pytest.mark.parametrize("family", ["wifi_on", "bluetooth_on", "airplane_mode_on", "dark_theme_on"])
def test_a_held_out_toggle_puts_a_target_where_no_trained_instance_had_it_in_that_sequence(
    family: str,
) -> None:
    """The toggles' held-out instances differ in the taps themselves, not only in a screen."""
    import json

    def taps(seed: int) -> tuple[tuple[int, int], ...]:
        _, actions = json.loads(splits.signature(family, seed))
        return tuple(tuple(a["coordinate"]) for a in actions if a["action"] == "click")

    trained = {taps(s) for s in splits.seeds(family, "trained", 40)}
    held = [taps(s) for s in splits.seeds(family, "held_out", 4)]
    assert len(trained) >= 6  # the target moves between trained instances too
    assert all(t not in trained for t in held)
