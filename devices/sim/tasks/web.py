"""Tasks in the Browser and the Shop."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, cast

from devices.sim.apps.browser import RESULT_KINDS, Browser
from devices.sim.apps.shop import PRODUCTS, Shop
from devices.sim.phone import SimPhone
from devices.sim.tasks.base import ExpertAction, Outcome, Task
from devices.sim.tasks.expert import by_rid, dialog_button, done, open_app, scroll_and_tap, tap, type_into
from devices.sim.tasks.registry import register

QUERIES = ("weather in Lisbon", "best pizza near me", "how tall is Mount Everest", "python asyncio tutorial")
PEOPLE = (
    ("Anna Schmidt", "Hauptstr. 5", "Berlin"),
    ("Kofi Mensah", "12 Ring Road", "Accra"),
    ("Hana Sato", "3-1 Shibuya", "Tokyo"),
)


def _browser(phone: SimPhone) -> Browser:
    return cast(Browser, phone.app("org.chromium.chrome"))


def _shop(phone: SimPhone) -> Shop:
    return cast(Shop, phone.app("com.example.shop"))


@register
class WebSearch(Task):
    name = "web_search"
    apps = ("org.chromium.chrome",)
    complexity = 4
    template = "Search the web for {query}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"query": rng.choice(QUERIES)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(self.params["query"] in _browser(phone).searches)

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Browser")
        yield from type_into(phone, "search_box", self.params["query"])
        yield ExpertAction("system_button", button="Enter")
        yield done()


@register
class OpenSearchResult(Task):
    name = "open_search_result"
    apps = ("org.chromium.chrome",)
    complexity = 5
    template = "Look up {query} and open the {kind} result"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"query": rng.choice(QUERIES), "kind": rng.choice(RESULT_KINDS)}

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(f"{self.params['query']} - {self.params['kind']}" in _browser(phone).visited)

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Browser")
        yield from type_into(phone, "search_box", self.params["query"])
        yield tap(phone, by_rid("search_button"), "Search")
        title = f"{self.params['query']} - {self.params['kind']}"
        yield from scroll_and_tap(phone, lambda v: v.text == title, title)
        yield done()


@register
class AddToCart(Task):
    name = "add_to_cart"
    apps = ("com.example.shop",)
    complexity = 4
    template = "Put the {product} in my shopping cart"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        return {"product": rng.choice(PRODUCTS)[0].lower()}

    def _name(self) -> str:
        return next(n for n, _ in PRODUCTS if n.lower() == self.params["product"])

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(_shop(phone).cart == {self._name(): 1})

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Shop")
        yield from scroll_and_tap(phone, lambda v: v.desc == self._name(), self._name())
        yield tap(phone, by_rid("add_to_cart"), "Add to cart")
        yield done()


@register
class RemoveFromCart(Task):
    name = "remove_from_cart"
    apps = ("com.example.shop",)
    complexity = 5
    template = "Remove the {product} from my cart"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        first, second = rng.sample([n for n, _ in PRODUCTS], 2)
        return {"product": first, "keep": second}

    def initialize(self, phone: SimPhone) -> None:
        super().initialize(phone)
        _shop(phone).cart.update({self.params["product"]: 1, self.params["keep"]: 2})

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        return bool(_shop(phone).cart == {self.params["keep"]: 2})

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        yield open_app("Shop")
        yield tap(phone, lambda v: v.desc.startswith("Cart"), "the cart")
        item = next(v for v in phone.view().walk() if v.desc == self.params["product"])
        yield ExpertAction("long_press", coordinate=item.center, time=1.0)
        yield dialog_button(phone, "Remove")
        yield done()


@register
class BuyProduct(Task):
    name = "buy_product"
    apps = ("com.example.shop",)
    complexity = 14
    template = "Order a {product} to {name}, {address}, {city}, paying with card {card}"

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        name, address, city = rng.choice(PEOPLE)
        card = "4" + "".join(str(rng.randint(0, 9)) for _ in range(15))
        return {
            "product": rng.choice(PRODUCTS)[0],
            "name": name,
            "address": address,
            "city": city,
            "card": card,
        }

    def is_successful(self, phone: SimPhone, outcome: Outcome | None = None) -> bool:
        orders = _shop(phone).orders
        if len(orders) != 1:
            return False
        order = orders[0]
        p = self.params
        return (
            order.items == {p["product"]: 1}
            and order.name == p["name"]
            and order.address == p["address"]
            and order.city == p["city"]
            and order.card_last4 == p["card"][-4:]
        )

    def solve(self, phone: SimPhone) -> Iterator[ExpertAction]:
        p = self.params
        yield open_app("Shop")
        yield from scroll_and_tap(phone, lambda v: v.desc == p["product"], p["product"])
        yield tap(phone, by_rid("add_to_cart"), "Add to cart")
        yield tap(phone, lambda v: v.desc == "Cart", "the cart")
        yield tap(phone, by_rid("checkout"), "Checkout")
        for field, key in (
            ("name", "name"),
            ("address", "address"),
            ("city", "city"),
            ("card_number", "card"),
        ):
            yield from type_into(phone, field, p[key])
        yield ExpertAction("system_button", button="Back")  # hide the keyboard
        yield tap(phone, by_rid("place_order"), "Place order")
        yield done()
