"""WebShop: the synthetic catalog, the clean-room simulator's grammar and flow, scoring, and episodes."""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import validate
from tasks_lib.webshop.adapter import OriginalWebShop
from tasks_lib.webshop.catalog import Goal, generate_catalog, generate_goals, read_goals, read_products
from tasks_lib.webshop.data import FIXTURES
from tasks_lib.webshop.env import WebShopEnv
from tasks_lib.webshop.reward import score_purchase
from tasks_lib.webshop.simulator import WebShopSim, parse_action
from tests.tasks_lib.helpers import last_text, malformed_policy, play, read_rows, tool_call
from trainer.mdp import Action, Observation

Prepared = Callable[..., dict[str, Path]]


def act(action: str) -> str:
    return tool_call("web_action", action=action)


def test_the_generator_is_deterministic_and_makes_200_products_and_100_goals() -> None:
    products, goals = (
        generate_catalog(240, seed=5),
        generate_goals(generate_catalog(240, seed=5), 120, seed=5),
    )
    assert products == generate_catalog(240, seed=5) and products != generate_catalog(240, seed=6)
    assert len(products) >= 200 and len({p.asin for p in products}) == len(products)
    assert len(goals) >= 100 and goals == generate_goals(products, 120, seed=5)
    by_asin = {p.asin: p for p in products}
    for goal in goals:
        product = by_asin[goal.asin]
        assert set(goal.attributes) <= set(product.attributes)
        assert all(
            product.options[name] and value in product.options[name] for name, value in goal.options.items()
        )
        assert product.price <= goal.price_upper
        assert goal.category in goal.instruction and all(v in goal.instruction for v in goal.options.values())
        assert score_purchase(product, dict(goal.options), goal).success


def test_the_score_weighs_type_attributes_options_and_price() -> None:
    products = read_products(FIXTURES / "products.jsonl")
    goal = read_goals(FIXTURES / "goals.jsonl")[
        0
    ]  # yellow medium rain jacket, breathable + water resistant, < $60
    jacket, parka, shorts, shampoo = (
        next(p for p in products if p.category == c)
        for c in ("rain jacket", "parka", "running shorts", "shampoo")
    )
    assert score_purchase(jacket, {"color": "yellow", "size": "medium"}, goal).score == 1.0
    assert score_purchase(jacket, {"color": "navy", "size": "medium"}, goal).score == pytest.approx(4 / 5)
    assert score_purchase(jacket, {}, goal).score == pytest.approx(3 / 5)
    # Same department, wrong type, one attribute, too expensive: 0.5 * (1 + 1 + 0) / 5.
    assert score_purchase(parka, {"color": "navy", "size": "medium"}, goal).score == pytest.approx(0.2)
    assert score_purchase(shorts, {"size": "medium"}, goal).score == pytest.approx(0.5 * 2 / 5)
    assert score_purchase(shampoo, {}, goal).score == pytest.approx(0.1 * 1 / 5)
    assert not score_purchase(jacket, {"color": "navy", "size": "medium"}, goal).success


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("search[red shirt]", ("search", "red shirt")),
        ("  Click[ Buy  Now ] ", ("click", "Buy Now")),
        ("click[< Prev]", ("click", "< Prev")),
        ("buy the shirt", None),
        ("search red shirt", None),
        ("click[a", None),
    ],
)
def test_actions_follow_webshops_grammar(text: str, parsed: tuple[str, str] | None) -> None:
    assert parse_action(text) == parsed


def fixture_shop() -> tuple[WebShopSim, list[Goal]]:
    return WebShopSim(read_products(FIXTURES / "products.jsonl")), read_goals(FIXTURES / "goals.jsonl")


def test_the_page_flow_runs_search_results_item_options_buy() -> None:
    shop, goals = fixture_shop()
    shop.reset(goals[0])
    assert shop.available_actions() == ["search[<query>]"]
    assert not shop.step("click[buy now]").valid
    results = shop.step("search[yellow rain jacket]")
    assert results.valid and "[B0FX000001] Harbor Line Waterproof Rain Jacket - $54.00" in results.observation
    assert not shop.step("search[socks]").valid  # search lives on the search page only
    assert shop.step("click[B0FX000001]").valid
    assert "color: [navy] [yellow] [black]" in shop.render()
    assert not shop.step("click[purple]").valid
    assert "Water resistant" in shop.step("click[features]").observation.replace("water", "Water")
    shop.step("click[< prev]")
    shop.step("click[yellow]")
    shop.step("click[medium]")
    assert "Selected: color=yellow, size=medium" in shop.render()
    bought = shop.step("click[Buy Now]")
    assert bought.done and bought.score == 1.0
    assert not shop.step("click[back to search]").valid


def test_results_page_through_and_back() -> None:
    products = generate_catalog(240, seed=0)
    shop = WebShopSim(products)
    shop.reset(generate_goals(products, 1)[0])
    first = shop.step("search[available option groups]").observation  # words every description has
    assert "(page 1 of 5, 50 items)" in first and "[Next >]" in first and "[< Prev]" not in first
    second = shop.step("click[next >]").observation
    assert "(page 2 of 5" in second and "[< Prev]" in second
    assert shop.step("click[< prev]").observation == first
    assert shop.step("click[back to search]").observation.endswith("Type your query as search[...].")


def test_prepare_writes_valid_rows_for_the_synthetic_catalog_and_for_a_catalog_folder(
    prepared: Prepared,
) -> None:
    synthetic = prepared("webshop", fixtures=False)
    rows = [row for path in synthetic.values() for row in read_rows(path)]
    assert len(rows) == 120 and all(validate(path) == [] for path in synthetic.values())
    assert json.loads(rows[0]["env_kwargs"]) == {
        "env_type": "webshop", "tools": ["web_action"], "catalog_seed": 0, "catalog_size": 240,
    }  # fmt: skip
    folder = prepared("webshop")
    assert all(validate(path) == [] for path in folder.values())
    env_kwargs = json.loads(read_rows(folder["train"])[0]["env_kwargs"])
    assert env_kwargs["catalog_path"] == "fixtures:products.jsonl"


def test_a_user_catalog_is_named_by_absolute_path(prepared: Prepared, tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "shop")
    rows = read_rows(prepared("webshop", fixtures=False, source=tmp_path / "shop")["train"])
    assert json.loads(rows[0]["env_kwargs"])["catalog_path"] == str(
        (tmp_path / "shop" / "products.jsonl").resolve()
    )
    assert play(rows[0], oracle(rows[0]), max_steps=15).total == 1.0


def oracle(row: dict[str, Any]) -> Callable[[Observation], str]:
    """Searches the target's words, pages to it, picks the goal's options and buys."""
    goal = Goal.from_json(row["reward_model"]["ground_truth"])
    plan = [f"click[{value}]" for value in goal.options.values()] + ["click[buy now]"]

    def policy(observation: Observation) -> str:
        page = last_text(observation)
        if "search[<query>]" in page:
            return act(
                f"search[{goal.category} {' '.join(goal.attributes)} {' '.join(goal.options.values())}]"
            )
        if "Results for" in page:
            return act(f"click[{goal.asin}]" if f"[{goal.asin}]" in page else "click[next >]")
        return act(plan.pop(0))

    return policy


@pytest.mark.parametrize("fixtures", [True, False])
def test_an_oracle_shopper_succeeds_on_every_goal(prepared: Prepared, fixtures: bool) -> None:
    rows = [row for path in prepared("webshop", fixtures=fixtures).values() for row in read_rows(path)]
    for row in rows[:40]:
        episode = play(row, oracle(row), max_steps=15)
        assert episode.done and episode.total == 1.0
        assert episode.infos[-1]["success"] and episode.infos[-1]["webshop_score"] == 1.0


def random_shopper(seed: int) -> Callable[[Observation], str]:
    rng = random.Random(seed)
    words = ["red", "shirt", "tea", "lamp", "vegan", "cable", "cheap", "small"]

    def policy(observation: Observation) -> str:
        text = last_text(observation)
        actions = re.findall(r"(click\[[^\]]*\]|search\[<query>\])", text.rsplit("Available actions:", 1)[-1])
        choice = rng.choice(actions or ["search[<query>]"])
        if choice.startswith("search"):
            choice = f"search[{' '.join(rng.sample(words, 2))}]"
        if rng.random() < 0.2:
            choice = rng.choice(["click[nothing]", "buy it", "search[]"])
        return act(choice)

    return policy


def test_a_random_shopper_rarely_succeeds_and_pays_for_invalid_actions(prepared: Prepared) -> None:
    rows = read_rows(prepared("webshop", fixtures=False)["train"])[:30]
    episodes = [play(row, random_shopper(seed), max_steps=15) for seed, row in enumerate(rows)]
    assert sum(e.total for e in episodes) / len(episodes) < 0.3
    penalised = [e for e in episodes if any(info["invalid_actions"] for info in e.infos)]
    assert penalised and all(e.total < 1.0 for e in penalised)


def test_malformed_calls_are_penalised_and_never_crash(prepared: Prepared) -> None:
    row = read_rows(prepared("webshop")["train"])[0]
    episode = play(row, malformed_policy("I would buy the jacket."), max_steps=15)
    assert episode.done and episode.total < 0.0
    assert episode.rewards[-1] == 0.0  # the final reply bought nothing


def test_score_mode_rewards_a_partial_match() -> None:
    env = WebShopEnv(shop="simulator", catalog_path=str(FIXTURES / "products.jsonl"), reward_mode="score")
    goal = read_goals(FIXTURES / "goals.jsonl")[0]
    row = {
        "prompt": [{"role": "user", "content": "Instruction: x"}],
        "reward_model": {"ground_truth": goal.to_json()},
    }
    env.reset(**row)
    for action in [
        "search[rain jacket]",
        "click[B0FX000001]",
        "click[navy]",
        "click[medium]",
        "click[buy now]",
    ]:
        _, reward, done, info = asyncio.run(env.step(Action(act(action))))
    assert done and reward == pytest.approx(0.8) and info["webshop_score"] == pytest.approx(0.8)


def test_the_original_webshop_adapter_says_how_to_install_it() -> None:
    with pytest.raises(ImportError, match="non-commercial"):
        OriginalWebShop(num_products=100)
