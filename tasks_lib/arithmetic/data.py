"""Arithmetic demo data: a deterministic generator of small multi-step sums.

Numbers stay small and prompts short so that SmolLM2-135M on two CPU cores gets some answers right
from the start (GRPO needs groups whose rewards differ) and can improve within minutes. ``--input``
takes a JSON Lines file of ``{"question", "answer"}`` items instead; ``--fixtures`` uses ours.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks_lib.arithmetic import prompts
from tasks_lib.arithmetic.reward import TOOL
from tasks_lib.common import Row, make_row, read_json_records, split_off, write_splits
from tasks_lib.demo_rules import Plan, PlannedCall, answer_with_last_result, extra_info
from tasks_lib.demo_rules import Row as RuleRow
from tasks_lib.gsm8k.reward import normalize_number
from tasks_lib.gsm8k.tools import evaluate, format_number
from tasks_lib.registry import PrepareOptions

DATA_SOURCE = "arithmetic"
FIXTURES = Path(__file__).parent / "fixtures"
ENV_KWARGS = {"env_type": "tool", "tools": ["calculator"]}
DEFAULT_SIZE = 400
# "small": the first-run demo's sums. "multiply": one 3-4-digit number times a 3-digit one, which a
# 135M model gets wrong unaided and the calculator gets right (docs/recipes.md#arithmetic-levels).
LEVELS = {"small": "small sums", "multiply": "3-4-digit multiplication"}


@dataclass(frozen=True)
class Item:
    question: str
    expression: str
    answer: str


def _expression(rng: random.Random, max_operand: int) -> str:
    a, b, c = (rng.randint(1, max_operand) for _ in range(3))
    # Mostly two numbers: a 135M model gets some of those right unaided, which GRPO needs to start.
    kind = rng.choice(("add", "add", "sub", "sub", "mul", "add3", "muladd"))
    if kind == "add":
        return f"{a} + {b}"
    if kind == "sub":
        return f"{max(a, b)} - {min(a, b)}"
    if kind == "mul":
        return f"{a % 10 + 2} * {b % 10 + 2}"
    if kind == "add3":
        return f"{a} + {b} + {c}"
    return f"{a % 10 + 2} * {b % 10 + 2} + {c}"


def _multiplication(rng: random.Random) -> str:
    return f"{rng.randint(100, 9999)} * {rng.randint(100, 999)}"


def generate(count: int, *, seed: int = 0, max_operand: int = 20, level: str = "small") -> list[Item]:
    """``count`` distinct problems; the same (count, seed, max_operand, level) always gives the same list."""
    if level not in LEVELS:
        raise ValueError(f"unknown arithmetic level {level!r}; choose one of {', '.join(LEVELS)}")
    rng = random.Random(seed)
    seen: set[str] = set()
    items: list[Item] = []
    attempts = 0
    while len(items) < count:
        attempts += 1
        if attempts > count * 50:
            raise ValueError(f"cannot make {count} distinct problems with operands up to {max_operand}")
        expression = _multiplication(rng) if level == "multiply" else _expression(rng, max_operand)
        if expression in seen:
            continue
        seen.add(expression)
        items.append(Item(f"What is {expression}?", expression, format_number(evaluate(expression))))
    return items


def to_rows(items: Iterable[Item], split: str, start_index: int) -> list[Row]:
    return [
        make_row(
            data_source=DATA_SOURCE,
            messages=prompts.messages(item.question),
            ground_truth=item.answer,
            index=start_index + offset,
            split=split,
            ability="math",
            env_kwargs=ENV_KWARGS,
            tools_kwargs={"calculator": {"reward": TOOL}},
            extra={"expression": item.expression},
        )
        for offset, item in enumerate(items)
    ]


def read_items(path: Path) -> list[Item]:
    items = []
    for record in read_json_records(path):
        question: Any = record.get("question")
        answer = normalize_number(str(record.get("answer", "")))
        if not isinstance(question, str) or answer is None:
            raise ValueError(f"{path}: every item needs a 'question' string and a numeric 'answer'")
        items.append(Item(question, str(record.get("expression", "")), answer))
    return items


def prepare(source: Path | None, output: Path, options: PrepareOptions) -> dict[str, Path]:
    """Generate (or read) the problems and write train/val parquet files."""
    if source is None:
        level = str(options.extra.get("level", "small"))
        items = generate(options.size or DEFAULT_SIZE, seed=options.seed, level=level)
    else:
        items = read_items(source / "examples.jsonl" if source.is_dir() else source)
    train, val = split_off(items, options.val_fraction, options.seed)
    splits = {"train": to_rows(train, "train", 0), "val": to_rows(val, "val", len(train))}
    return write_splits(splits, output, limit=options.limit)


def demonstrate(row: RuleRow) -> Plan | None:
    """Give the row's expression to the calculator, answer with its result (docs/demonstrations.md#rules)."""
    expression = extra_info(row).get("expression")
    if not expression:
        return None
    return Plan([PlannedCall("calculator", {"expression": str(expression)})], answer_with_last_result)
