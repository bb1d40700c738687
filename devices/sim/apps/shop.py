"""Shop: products, a cart, and a checkout form that validates before placing an order."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Dialog, Screen, TextField
from devices.sim.ui import View

PRODUCTS = (
    ("Wireless earbuds", 59.99),
    ("Phone case", 14.50),
    ("USB-C cable", 9.99),
    ("Power bank", 34.00),
    ("Smart watch", 129.00),
    ("Screen protector", 7.99),
    ("Bluetooth speaker", 45.00),
    ("Laptop stand", 39.90),
    ("Desk lamp", 24.99),
    ("Coffee mug", 11.00),
    ("Backpack", 69.00),
    ("Water bottle", 18.50),
)


@dataclass
class Order:
    items: dict[str, int]
    name: str
    address: str
    city: str
    card_last4: str


@dataclass
class Checkout:
    name: TextField = field(default_factory=lambda: TextField(hint="Full name"))
    address: TextField = field(default_factory=lambda: TextField(hint="Street address"))
    city: TextField = field(default_factory=lambda: TextField(hint="City"))
    card: TextField = field(default_factory=lambda: TextField(hint="Card number", password=True))


class Shop(App):
    package = "com.example.shop"
    label = "Shop"
    glyph = "$"
    color = "#188038"
    activities: ClassVar[dict[str, str]] = {
        "main": ".ProductListActivity",
        "product": ".ProductActivity",
        "cart": ".CartActivity",
        "checkout": ".CheckoutActivity",
        "done": ".OrderConfirmedActivity",
    }

    def reset(self) -> None:
        super().reset()
        self.cart: dict[str, int] = {}
        self.orders: list[Order] = []
        self.product: str | None = None
        self.checkout = Checkout()
        self.show_counts = True  # how many of a product the cart holds, on its page and the cart button

    def price(self, name: str) -> float:
        return dict(PRODUCTS)[name]

    def page_main(self, screen: Screen) -> None:
        count = sum(self.cart.values())
        cart = f"Cart ({count})" if self.show_counts else "Cart"
        screen.title("Shop", actions=[("$", cart, lambda: self.go("cart"))])
        products = self.phone.arrange(PRODUCTS, "products")

        def item(i: int, y: int, parent: View) -> None:
            mark, (name, price) = products[i]
            screen.row(
                f"{name}   ${price:.2f}",
                on_tap=lambda: self._open(name),
                parent=parent,
                y=y,
                rid="product_name",
                desc=name,
                mark=mark,
            )

        screen.scroll_list("products", len(products), item, item_height=200)

    def page_product(self, screen: Screen) -> None:
        name = self.product or PRODUCTS[0][0]
        screen.title(name, back=self.up, actions=[("$", "Cart", lambda: self.go("cart"))])
        screen.text(f"${self.price(name):.2f}", size=56, rid="price")
        if self.show_counts:
            screen.text(f"In cart: {self.cart.get(name, 0)}", size=40, rid="in_cart")
        screen.button("Add to cart", lambda: self._add(name), rid="add_to_cart")

    def page_cart(self, screen: Screen) -> None:
        screen.title("Cart", back=self.up)
        items = sorted(self.cart.items())
        if not items:
            screen.text("Your cart is empty", size=44, rid="empty")
            return
        for name, qty in items:
            screen.row(
                f"{name} × {qty}   ${self.price(name) * qty:.2f}",
                rid="cart_item",
                desc=name,
                on_long_press=partial(self._confirm_remove, name),
            )
        total = sum(self.price(n) * q for n, q in items)
        screen.text(f"Total ${total:.2f}", size=48, rid="total")
        screen.button("Checkout", lambda: self.go("checkout"), rid="checkout")

    def page_checkout(self, screen: Screen) -> None:
        screen.title("Checkout", back=self.up)
        c = self.checkout
        for f, rid in ((c.name, "name"), (c.address, "address"), (c.city, "city"), (c.card, "card_number")):
            screen.field(f, rid=rid)
        screen.button("Place order", self._place, rid="place_order")

    def page_done(self, screen: Screen) -> None:
        screen.title("Order placed")
        screen.text(f"Thank you! Order #{len(self.orders)} is on its way.", size=44, rid="confirmation")
        screen.button("Continue shopping", lambda: setattr(self, "pages", ["main"]), rid="continue")

    def _open(self, name: str) -> None:
        self.product = name
        self.go("product")

    def _add(self, name: str) -> None:
        self.cart[name] = self.cart.get(name, 0) + 1

    def _confirm_remove(self, name: str) -> None:
        def remove() -> None:
            self.cart.pop(name, None)

        self.phone.dialog = Dialog(
            "Remove item?", f"Remove {name} from the cart?", [("Cancel", lambda: None), ("Remove", remove)]
        )

    def _place(self) -> None:
        c = self.checkout
        card = c.card.value.replace(" ", "")
        missing = [f.hint for f in (c.name, c.address, c.city) if not f.value.strip()]
        if missing or not (card.isdigit() and len(card) == 16) or not self.cart:
            problem = f"Please fill in: {', '.join(missing)}" if missing else "Enter a 16-digit card number"
            if not self.cart:
                problem = "Your cart is empty"
            self.phone.dialog = Dialog("Can't place order", problem, [("OK", lambda: None)])
            return
        self.orders.append(
            Order(
                dict(self.cart),
                c.name.value.strip(),
                c.address.value.strip(),
                c.city.value.strip(),
                card[-4:],
            )
        )
        self.cart.clear()
        self.checkout = Checkout()
        self.pages = ["main", "done"]
