"""A clean-room WebShop simulator: WebShop's action grammar and page flow over our own catalog.

Actions are ``search[query]`` (on the search page) and ``click[target]`` where the target is one of the
page's bracketed buttons, matched case-insensitively. Pages: search -> results (10 per page, BM25
over title, type, attributes and description) -> item (pick one value per option) -> description /
features -> ``click[buy now]``, which ends the episode and scores the purchase against the goal.
Nothing here comes from the original WebShop code; only the grammar and the flow are the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tasks_lib.bm25 import Bm25Index
from tasks_lib.webshop.catalog import Goal, Product
from tasks_lib.webshop.reward import score_purchase

_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)

BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
DESCRIPTION = "description"
FEATURES = "features"
BUY_NOW = "buy now"
_LABELS = {BACK_TO_SEARCH: "Back to Search", PREV_PAGE: "< Prev", NEXT_PAGE: "Next >"}


def parse_action(text: str) -> tuple[str, str] | None:
    """("search" | "click", argument) for a well-formed action, else None."""
    match = _ACTION.match(text)
    if match is None:
        return None
    return match.group(1).lower(), " ".join(match.group(2).split())


@dataclass
class ShopStep:
    observation: str
    done: bool = False
    valid: bool = True
    score: float | None = None  # set when the episode ends with a purchase
    error: str = ""


@dataclass
class _State:
    page: str = "search"
    query: str = ""
    results: list[int] = field(default_factory=list)
    page_number: int = 1
    product: int | None = None
    selected: dict[str, str] = field(default_factory=dict)


class WebShopSim:
    """One shopper session at a time: ``reset(goal)``, then ``step(action)`` until done."""

    def __init__(
        self,
        products: Sequence[Product],
        index: Bm25Index | None = None,
        *,
        results_per_page: int = 10,
        max_results: int = 50,
    ) -> None:
        if not products:
            raise ValueError("the catalog has no products")
        self.products = list(products)
        self.by_asin = {product.asin.lower(): i for i, product in enumerate(self.products)}
        self.index = index or Bm25Index.build([product.search_text() for product in self.products])
        self.results_per_page = results_per_page
        self.max_results = max_results
        self.goal: Goal | None = None
        self.state = _State()

    def reset(self, goal: Goal) -> str:
        """Start a session on the search page; the text returned omits the instruction (the prompt has it)."""
        self.goal = goal
        self.state = _State()
        return self.render(with_instruction=False)

    # -- what the page offers ------------------------------------------------------------------
    def _page_items(self) -> list[int]:
        start = (self.state.page_number - 1) * self.results_per_page
        return self.state.results[start : start + self.results_per_page]

    def _result_buttons(self) -> list[str]:
        state = self.state
        buttons = [BACK_TO_SEARCH]
        if state.page_number > 1:
            buttons.append(PREV_PAGE)
        if state.page_number * self.results_per_page < len(state.results):
            buttons.append(NEXT_PAGE)
        return buttons

    def clickables(self) -> list[str]:
        state = self.state
        if state.page == "results":
            return self._result_buttons() + [self.products[i].asin.lower() for i in self._page_items()]
        if state.page == "item" and state.product is not None:
            values = [value for values in self.products[state.product].options.values() for value in values]
            return [BACK_TO_SEARCH, PREV_PAGE, *values, DESCRIPTION, FEATURES, BUY_NOW]
        if state.page in (DESCRIPTION, FEATURES):
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def available_actions(self) -> list[str]:
        if self.state.page == "search":
            return ["search[<query>]"]
        return [f"click[{target}]" for target in self.clickables()]

    # -- acting --------------------------------------------------------------------------------
    def step(self, action: str) -> ShopStep:
        if self.goal is None:
            raise RuntimeError("step() before reset()")
        if self.state.page == "done":
            return self._invalid("the episode is over")
        parsed = parse_action(action)
        if parsed is None:
            return self._invalid(f"{action!r} is not search[...] or click[...]")
        kind, argument = parsed
        if kind == "search":
            if self.state.page != "search":
                return self._invalid(
                    "search is only available on the search page; click[back to search] first"
                )
            if not argument:
                return self._invalid("the search query is empty")
            return self._search(argument)
        target = argument.lower()
        if target not in self.clickables():
            return self._invalid(f"there is no [{argument}] to click on this page")
        return self._click(target)

    def _invalid(self, reason: str) -> ShopStep:
        return ShopStep(f"Invalid action: {reason}.\n\n{self.render()}", valid=False, error=reason)

    def _search(self, query: str) -> ShopStep:
        hits = self.index.search(query, self.max_results)
        self.state = _State(page="results", query=query, results=[doc for doc, _ in hits])
        return ShopStep(self.render())

    def _click(self, target: str) -> ShopStep:
        state = self.state
        if target == BACK_TO_SEARCH:
            self.state = _State()
        elif target == NEXT_PAGE:
            state.page_number += 1
        elif target == PREV_PAGE:
            if state.page == "results":
                state.page_number -= 1
            elif state.page == "item":
                state.page, state.product, state.selected = "results", None, {}
            else:
                state.page = "item"
        elif state.page == "results":
            state.page, state.product, state.selected = "item", self.by_asin[target], {}
        elif target in (DESCRIPTION, FEATURES):
            state.page = target
        elif target == BUY_NOW:
            return self._buy()
        else:
            self._select(target)
        return ShopStep(self.render())

    def _select(self, value: str) -> None:
        product = self.products[self.state.product or 0]
        for name, values in product.options.items():
            if value in values:
                self.state.selected[name] = value

    def _buy(self) -> ShopStep:
        if self.state.product is None or self.goal is None:
            raise RuntimeError("buy without a product page")
        product = self.products[self.state.product]
        score = score_purchase(product, self.state.selected, self.goal)
        chosen = ", ".join(f"{k}={v}" for k, v in sorted(self.state.selected.items())) or "no options"
        self.state.page = "done"
        text = f"Thank you for shopping with us! You bought {product.title} ({chosen}). Your score: {score.score:.3f}"
        return ShopStep(text, done=True, score=score.score)

    # -- rendering -----------------------------------------------------------------------------
    def render(self, *, with_instruction: bool = True) -> str:
        """The current page as text; every page repeats the instruction, as WebShop's pages do."""
        goal_line = f"Instruction: {self.goal.instruction}\n" if self.goal and with_instruction else ""
        page = self.state.page
        if page == "search":
            body = "[Search]\nType your query as search[...]."
        elif page == "results":
            body = self._render_results()
        elif page == "item":
            body = self._render_item()
        elif page in (DESCRIPTION, FEATURES):
            body = self._render_details()
        else:
            body = "The session is over."
        return f"{goal_line}{body}"

    def _render_results(self) -> str:
        state = self.state
        pages = max(1, -(-len(state.results) // self.results_per_page))
        buttons = " ".join(f"[{_LABELS[button]}]" for button in self._result_buttons())
        lines = [
            f'Results for "{state.query}" (page {state.page_number} of {pages}, {len(state.results)} items)',
            buttons,
        ]
        if not state.results:
            lines.append("No products match your query.")
        for i in self._page_items():
            product = self.products[i]
            lines.append(f"[{product.asin}] {product.title} - ${product.price:.2f}")
        return "\n".join(lines)

    def _render_item(self) -> str:
        product = self.products[self.state.product or 0]
        lines = ["[Back to Search] [< Prev]", product.title, f"Price: ${product.price:.2f}"]
        for name, values in product.options.items():
            lines.append(f"{name}: " + " ".join(f"[{value}]" for value in values))
        chosen = ", ".join(f"{k}={v}" for k, v in sorted(self.state.selected.items())) or "none"
        lines += [f"Selected: {chosen}", "[Description] [Features] [Buy Now]"]
        return "\n".join(lines)

    def _render_details(self) -> str:
        product = self.products[self.state.product or 0]
        if self.state.page == DESCRIPTION:
            text = product.description or "No description."
        else:
            text = "\n".join(f"- {attribute}" for attribute in product.attributes)
        return f"[Back to Search] [< Prev]\n{product.title}\n{text}"
