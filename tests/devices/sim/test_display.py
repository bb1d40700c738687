"""Display profiles: a UI scale as Android's density, at most five list rows, item marks, seeded order."""

from __future__ import annotations

import pytest

from devices.sim.apps.shop import PRODUCTS
from devices.sim.display import LEARNABLE, MARK_COLOURS, PHYSICAL_DENSITY, STANDARD
from devices.sim.phone import SimPhone
from devices.sim.shell import run as run_command
from devices.sim.tasks import TASKS, execute
from devices.sim.ui import View


def shop_rows(phone: SimPhone) -> list[View]:
    phone.start("com.example.shop")
    return [v for v in phone.view().walk() if v.rid.endswith(":id/product_name")]


def test_the_standard_profile_lists_everything_that_fits_in_the_apps_order_without_marks() -> None:
    phone = SimPhone("t", display=STANDARD)
    TASKS["add_to_cart"].create(3).initialize(phone)
    rows = shop_rows(phone)
    assert [r.desc for r in rows] == [name for name, _ in PRODUCTS][: len(rows)]
    assert len(rows) > 5
    assert all(not r.children for r in rows)


def test_the_learnable_profile_shows_five_marked_rows_in_an_order_drawn_from_the_task_seed() -> None:
    orders = []
    for seed in (0, 1, 0):
        phone = SimPhone("t", display=LEARNABLE)
        TASKS["add_to_cart"].create(seed).initialize(phone)
        listed = shop_rows(phone)
        container = next(v for v in phone.view().walk() if v.kind == "list")
        slot = (container.bounds[3] - container.bounds[1]) // 5
        rows = [r for r in listed if r.bounds[3] - r.bounds[1] == slot]  # five rows fill the list exactly
        assert len(rows) == 5
        assert len(listed) <= 6
        marks = [r.children[0] for r in rows]
        assert all(m.kind == "icon" and m.fill in MARK_COLOURS for m in marks)
        assert len({m.fill for m in marks}) == 5  # told apart at a glance
        assert [m.glyph for m in marks] == [r.desc[0].upper() for r in rows]
        orders.append([r.desc for r in rows])
    assert orders[0] == orders[2]  # one seed, one order
    assert orders[0] != orders[1]


def test_a_larger_density_draws_every_widget_and_glyph_larger() -> None:
    small, large = SimPhone("s"), SimPhone("l", display=LEARNABLE)
    for phone in (small, large):
        phone.start("com.android.settings")
    title = [next(v for v in p.view().walk() if v.rid.endswith(":id/toolbar_title")) for p in (small, large)]
    assert title[1].size == round(title[0].size * LEARNABLE.density / PHYSICAL_DENSITY)
    assert title[1].bounds[3] - title[1].bounds[1] > title[0].bounds[3] - title[0].bounds[1]


def test_wm_density_sets_reports_and_resets_the_ui_scale() -> None:
    phone = SimPhone("t")
    assert run_command(phone, "wm density").stdout == b"Physical density: 420\n"
    before = phone.screenshot_png()
    assert run_command(phone, "wm density 840").code == 0
    assert phone.ui_scale == 2.0
    assert run_command(phone, "wm density").stdout == b"Physical density: 420\nOverride density: 840\n"
    assert phone.screenshot_png() != before
    assert run_command(phone, "wm density 99999").code != 0
    run_command(phone, "wm density reset")
    assert phone.ui_scale == 1.0
    assert phone.screenshot_png() == before


@pytest.mark.parametrize("display", [STANDARD, LEARNABLE])
@pytest.mark.parametrize(
    ("name", "repeated"), [("add_several_to_cart", "Add to cart"), ("star_two_files", "long_press")]
)
def test_history_tasks_show_the_same_screen_before_a_repeated_step(display, name: str, repeated: str) -> None:  # type: ignore[no-untyped-def]
    """Halfway through, the screen is what it was at the first such step: only the agent's own
    history says whether it has done it once already."""
    task = TASKS[name].create(0)
    assert task.history
    phone = SimPhone("t", display=display)
    task.initialize(phone)
    frames: list[bytes] = []
    for action in task.solve(phone):
        if repeated in (action.action, action.target):
            frames.append(phone.screenshot_png())
        execute(phone, action)
    assert task.is_successful(phone)
    assert len(frames) >= 2
    assert frames[0] == frames[1]
