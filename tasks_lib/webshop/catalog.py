"""WebShop products and shopping goals: the records, a deterministic synthetic generator, and JSONL I/O.

The synthetic catalog is ours (invented brands, products and wording); the same (seed, size) always
gives the same products and goals, so prepared rows name a catalog by its seed instead of shipping it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

DEFAULT_CATALOG_SIZE = 240
DEFAULT_GOAL_COUNT = 120


@dataclass(frozen=True)
class Product:
    asin: str
    title: str
    category: str  # the product type, e.g. "rain jacket"
    department: str
    attributes: tuple[str, ...]
    options: Mapping[str, tuple[str, ...]]  # option name -> values, e.g. {"color": ("red", "navy")}
    price: float
    description: str = ""

    def search_text(self) -> str:
        return " ".join([self.title, self.category, *self.attributes, self.description])

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "attributes": list(self.attributes),
            "options": {name: list(values) for name, values in self.options.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Product:
        return cls(
            asin=str(data["asin"]).upper(),
            title=str(data["title"]),
            category=str(data["category"]).lower(),
            department=str(data.get("department", "")).lower(),
            attributes=tuple(str(a).lower() for a in data.get("attributes", [])),
            options={
                str(k).lower(): tuple(str(v).lower() for v in vs) for k, vs in data.get("options", {}).items()
            },
            price=float(data["price"]),
            description=str(data.get("description", "")),
        )


@dataclass(frozen=True)
class Goal:
    """What the shopper asked for; any product that matches it all scores 1, not only ``asin``."""

    asin: str  # the product the goal was written from (a known solution)
    category: str
    department: str
    attributes: tuple[str, ...]
    options: Mapping[str, str] = field(default_factory=dict)
    price_upper: float = math.inf
    instruction: str = ""

    def to_json(self) -> dict[str, Any]:
        """Parquet-friendly: options as a list of {name, value} so every row shares one schema."""
        return {
            **dataclasses.asdict(self),
            "attributes": list(self.attributes),
            "options": [{"name": name, "value": value} for name, value in self.options.items()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Goal:
        raw_options = data.get("options") or {}
        options = (
            {str(o["name"]).lower(): str(o["value"]).lower() for o in raw_options}
            if isinstance(raw_options, list)
            else {str(k).lower(): str(v).lower() for k, v in raw_options.items()}
        )
        return cls(
            asin=str(data.get("asin", "")).upper(),
            category=str(data["category"]).lower(),
            department=str(data.get("department", "")).lower(),
            attributes=tuple(str(a).lower() for a in data.get("attributes", [])),
            options=options,
            price_upper=float(data.get("price_upper", math.inf)),
            instruction=str(data.get("instruction", "")),
        )


# The synthetic catalog's departments (product types, attributes, and options whose values never collide
# within a department: a click names a value, so two options must not share one) and its invented brands.
_CATALOG_DATA = json.loads((Path(__file__).parent / "departments.json").read_text(encoding="utf-8"))
_DEPARTMENTS: dict[str, dict[str, Any]] = _CATALOG_DATA["departments"]
_BRANDS: list[str] = _CATALOG_DATA["brands"]


def _product(rng: random.Random, number: int) -> Product:
    department = rng.choice(sorted(_DEPARTMENTS))
    spec = _DEPARTMENTS[department]
    category = rng.choice(spec["types"])
    attributes = tuple(sorted(rng.sample(spec["attributes"], rng.randint(2, 4))))
    options = {
        name: tuple(rng.sample(values, rng.randint(2, len(values))))
        for name, values in spec["options"].items()
    }
    brand = rng.choice(_BRANDS)
    shown = " ".join(attribute.title() for attribute in rng.sample(attributes, 2))
    title = f"{brand} {shown} {category.title()}"
    price = round(rng.uniform(6, 120), 2)
    description = (
        f"A {category} from {brand}: {', '.join(attributes)}. Available in {len(options)} option groups."
    )
    return Product(f"B0{number:08d}", title, category, department, attributes, options, price, description)


def generate_catalog(size: int = DEFAULT_CATALOG_SIZE, *, seed: int = 0) -> list[Product]:
    """``size`` synthetic products; the same (size, seed) always gives the same list."""
    if size < 1:
        raise ValueError(f"catalog size must be at least 1, got {size}")
    rng = random.Random(f"webshop-catalog-{seed}")
    return [_product(rng, number) for number in range(1, size + 1)]


def _instruction(rng: random.Random, goal: Goal) -> str:
    wants = " and ".join(goal.attributes)
    picks = ", ".join(f"{name} {value}" for name, value in goal.options.items())
    opener = rng.choice(["i need", "i am looking for", "find me", "i want to buy"])
    return f"{opener} a {wants} {goal.category} with {picks}, and price lower than {goal.price_upper:.2f} dollars"


def generate_goals(
    products: Sequence[Product], count: int = DEFAULT_GOAL_COUNT, *, seed: int = 0
) -> list[Goal]:
    """``count`` goals, each written from one product (distinct products while there are enough)."""
    if count < 1:
        raise ValueError(f"goal count must be at least 1, got {count}")
    rng = random.Random(f"webshop-goals-{seed}")
    order = list(products)
    rng.shuffle(order)
    goals = []
    for number in range(count):
        product = order[number % len(order)]
        attributes = tuple(sorted(rng.sample(product.attributes, min(2, len(product.attributes)))))
        options = {name: rng.choice(values) for name, values in product.options.items()}
        price_upper = float(math.ceil((product.price + rng.uniform(1, 30)) / 10) * 10)
        goal = Goal(product.asin, product.category, product.department, attributes, options, price_upper)
        goals.append(dataclasses.replace(goal, instruction=_instruction(rng, goal)))
    return goals


@lru_cache(maxsize=4)
def synthetic_catalog(size: int, seed: int) -> tuple[Product, ...]:
    return tuple(generate_catalog(size, seed=seed))


def read_products(path: Path) -> list[Product]:
    return [
        Product.from_json(json.loads(line))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def read_goals(path: Path) -> list[Goal]:
    return [
        Goal.from_json(json.loads(line))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def write_jsonl(records: Iterable[Mapping[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
