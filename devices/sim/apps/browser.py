"""Browser: a search page, a results page and result pages, with history."""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Screen, TextField
from devices.sim.ui import View

RESULT_KINDS = ("Wikipedia", "News", "Images", "Maps", "Videos", "Forum")


class Browser(App):
    package = "org.chromium.chrome"
    label = "Browser"
    glyph = "◉"
    color = "#d93025"
    activities: ClassVar[dict[str, str]] = {
        "main": ".ChromeTabbedActivity",
        "results": ".SearchActivity",
        "page": ".PageActivity",
    }

    def reset(self) -> None:
        super().reset()
        self.query = TextField(hint="Search or type URL", on_submit=self._search)
        self.searches: list[str] = []
        self.visited: list[str] = []
        self.current_query = ""
        self.current_page = ""

    def results(self, query: str) -> list[str]:
        return [f"{query} - {kind}" for kind in RESULT_KINDS]

    def page_main(self, screen: Screen) -> None:
        screen.title("Search")
        screen.field(self.query, rid="search_box")
        screen.button("Search", self._search, rid="search_button")
        if self.searches:
            screen.text("Recent searches", size=36, ink="#5f6368")
            for q in reversed(self.searches[-3:]):
                screen.row(q, on_tap=partial(self._search, q), rid="recent_search")

    def page_results(self, screen: Screen) -> None:
        screen.title(self.current_query, back=self.up)
        results = self.results(self.current_query)

        def item(i: int, y: int, parent: View) -> None:
            title = results[i]
            screen.row(
                title, on_tap=lambda: self._visit(title), parent=parent, y=y, rid="result_title", mark=i
            )

        screen.scroll_list("results:" + self.current_query, len(results), item, item_height=220)

    def page_page(self, screen: Screen) -> None:
        screen.title(self.current_page, back=self.up)
        screen.text(f"This is the page for {self.current_page}.", size=40)

    def _search(self, query: str | None = None) -> None:
        text = (query if query is not None else self.query.value).strip()
        if not text:
            return
        self.searches.append(text)
        self.current_query = text
        self.phone.focus(None)
        self.pages = ["main", "results"]

    def _visit(self, title: str) -> None:
        self.visited.append(title)
        self.current_page = title
        self.go("page")
