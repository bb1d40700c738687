"""Tasks where the right action depends on what the agent already did, not only on the screen.

In these tasks the screen hides progress: the shop does not show how many of an item are in the
cart, and the folder does not mark starred files. Halfway through, the screen looks exactly as it
did at the start, so only the agent's own history (its earlier actions in the prompt) says what
comes next. This is where semi-online training, which trains on the policy's own history and
patches it after a mistake, can differ from offline training on the expert's history.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from devices.sim.apps.files import DEFAULT_FOLDERS
from devices.sim.apps.shop import PRODUCTS
from devices.sim.phone import SimPhone
from devices.sim.tasks.base import ExpertAction, Outcome, Task
from devices.sim.tasks.expert import by_rid, dialog_button, done, open_app, scroll_and_tap, tap
from devices.sim.tasks.productivity import _files, file_options
from devices.sim.tasks.registry import register
from devices.sim.tasks.web import _shop

# Items these families draw from: a few each, so that held-out instances can be unseen
# combinations of items and counts that were all seen in training.
CART_PRODUCTS = [name for name, _ in PRODUCTS[:6]]
CART_COUNTS = (2, 3)
STAR_FOLDERS = ("Download", "Pictures")


@register
class AddSeveralToCart(Task):
    """Tap "Add to cart" exactly ``count`` times on a product page that does not show the count."""

    name = "add_several_to_cart"
    apps = ("com.example.shop",)
    complexity = 6
    history = True
    template = "Put {count} of the {product} in my shopping cart"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"count": rng.choice(CART_COUNTS), "product": rng.choice(CART_PRODUCTS).lower()}

    def _name(self) -> str:
        return next(n for n in CART_PRODUCTS if n.lower() == self.params["product"])

    def initialize(self, phone: SimPhone) -> None:
        super().initialize(phone)
        _shop(phone).show_counts = False

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return _shop(phone).cart == {self._name(): self.params["count"]}

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Shop")
        yield from scroll_and_tap(phone, lambda v: v.desc == self._name(), self._name())
        for _ in range(self.params["count"]):
            yield tap(phone, by_rid("add_to_cart"), "Add to cart")
        yield done()


@register
class StarTwoFiles(Task):
    """Star two files of a folder whose list does not mark starred files."""

    name = "star_two_files"
    apps = ("com.google.android.documentsui",)
    complexity = 9
    history = True
    template = "Star {first} and {second} in {folder}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        folder = rng.choice(STAR_FOLDERS)
        first, second = rng.sample(DEFAULT_FOLDERS[folder], 2)
        return {"folder": folder, "first": first, "second": second}

    def initialize(self, phone: SimPhone) -> None:
        super().initialize(phone)
        _files(phone).show_stars = False

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        folder = self.params["folder"]
        return _files(phone).starred == {(folder, self.params["first"]), (folder, self.params["second"])}

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Files")
        yield tap(phone, lambda v: v.desc == self.params["folder"], self.params["folder"])
        for name in (self.params["first"], self.params["second"]):
            yield from file_options(phone, name)
            yield dialog_button(phone, "Star")
        yield done()
