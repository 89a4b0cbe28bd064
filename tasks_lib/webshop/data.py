"""WebShop goals -> rows in the data contract.

Without ``--input`` a synthetic catalog (240 products) and goals (``--size``, default 120) are generated
from ``--seed``; rows name the catalog by seed and size, so the env regenerates it wherever it runs.
``--input DIR`` (and ``--fixtures``) read ``DIR/products.jsonl`` and ``DIR/goals.jsonl`` in our schema
(see catalog.py); rows point at that products file (our fixtures relative to the package). A copy of
the catalog is written to ``<output>/catalog.jsonl`` to look at.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks_lib.common import Row, make_row, portable_path, split_off, write_splits
from tasks_lib.registry import PrepareOptions
from tasks_lib.webshop import prompts
from tasks_lib.webshop.catalog import (
    DEFAULT_CATALOG_SIZE,
    DEFAULT_GOAL_COUNT,
    Goal,
    generate_goals,
    read_goals,
    read_products,
    synthetic_catalog,
    write_jsonl,
)

logger = logging.getLogger(__name__)

DATA_SOURCE = "webshop"
FIXTURES = Path(__file__).parent / "fixtures"


def to_rows(goals: Sequence[Goal], split: str, start_index: int, env_kwargs: dict[str, Any]) -> list[Row]:
    return [
        make_row(
            data_source=DATA_SOURCE,
            messages=prompts.messages(goal.instruction),
            ground_truth=goal.to_json(),
            index=start_index + offset,
            split=split,
            ability="web_shopping",
            env_kwargs=env_kwargs,
            extra={"target_asin": goal.asin},
        )
        for offset, goal in enumerate(goals)
    ]


def prepare(source: Path | None, output: Path, options: PrepareOptions) -> dict[str, Path]:
    env_kwargs: dict[str, Any] = {"env_type": "webshop", "tools": ["web_action"]}
    if source is None:
        catalog_size = int(options.extra.get("catalog_size", DEFAULT_CATALOG_SIZE))
        products = list(synthetic_catalog(catalog_size, options.seed))
        goals = generate_goals(products, options.size or DEFAULT_GOAL_COUNT, seed=options.seed)
        env_kwargs.update(catalog_seed=options.seed, catalog_size=catalog_size)
        write_jsonl((goal.to_json() for goal in goals), output / "goals.jsonl")
    else:
        products = read_products(source / "products.jsonl")
        goals = read_goals(source / "goals.jsonl")
        known = {product.asin for product in products}
        unknown = [goal.asin for goal in goals if goal.asin and goal.asin not in known]
        if unknown:
            raise ValueError(f"goals name products that are not in the catalog: {unknown[:5]}")
        env_kwargs["catalog_path"] = portable_path(source / "products.jsonl", FIXTURES)
    write_jsonl((product.to_json() for product in products), output / "catalog.jsonl")  # to look at
    train, val = split_off(goals, options.val_fraction, options.seed)
    splits = {
        "train": to_rows(train, "train", 0, env_kwargs),
        "val": to_rows(val, "val", len(train), env_kwargs),
    }
    logger.info("WebShop: %d products, %d goals", len(products), len(goals))
    return write_splits(splits, output, limit=options.limit)
