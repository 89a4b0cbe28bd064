"""HotpotQA raw files -> rows in the data contract.

Accepted input: HotpotQA's JSON files (``hotpot_train_v1.1.json``, ``hotpot_dev_distractor_v1.json``:
a list of ``{_id, question, answer, supporting_facts, context: [[title, [sentences]]], type, level}``),
as one file or a folder holding them; an optional ``answer_aliases`` list per item is honoured. Each
row's search corpus is its own context paragraphs, unless ``--corpus`` names a corpus JSONL (one
``{title, text}`` per line) or ``pooled`` (every context paragraph of the input, deduplicated); then
one shared BM25 index is written to ``<output>/search_index`` and every row points at it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tasks_lib.common import Row, make_row, read_json_records, split_off, write_splits
from tasks_lib.demo_rules import Plan, PlannedCall, extra_info
from tasks_lib.demo_rules import Row as RuleRow
from tasks_lib.hotpotqa import prompts
from tasks_lib.hotpotqa.tools import DEFAULT_TOP_K, Passage, read_passages, write_shared_index
from tasks_lib.registry import PrepareOptions

logger = logging.getLogger(__name__)

DATA_SOURCE = "hotpotqa"
FIXTURES = Path(__file__).parent / "fixtures"
ENV_KWARGS = {"env_type": "tool", "tools": ["search"]}


def context_passages(item: dict[str, Any]) -> list[Passage]:
    """An item's context paragraphs as (title, text), the sentences of each joined."""
    return [
        (str(title), " ".join(str(s).strip() for s in sentences))
        for title, sentences in item.get("context", [])
    ]


def ground_truth(item: dict[str, Any]) -> list[str]:
    """The answer first, then its aliases (deduplicated, order kept)."""
    return list(dict.fromkeys([str(item["answer"]), *(str(a) for a in item.get("answer_aliases", []))]))


def to_rows(
    items: Iterable[dict[str, Any]], split: str, start_index: int, index_dir: Path | None
) -> list[Row]:
    rows: list[Row] = []
    for item in items:
        if not item.get("question") or not item.get("answer"):
            logger.warning("skipping HotpotQA item %s without question or answer", item.get("_id"))
            continue
        if index_dir is not None:
            search_kwargs: dict[str, Any] = {"index_dir": str(index_dir.resolve()), "top_k": DEFAULT_TOP_K}
        else:
            passages = [{"title": title, "text": text} for title, text in context_passages(item)]
            search_kwargs = {"passages": passages, "top_k": DEFAULT_TOP_K}
        rows.append(
            make_row(
                data_source=DATA_SOURCE,
                messages=prompts.messages(str(item["question"])),
                ground_truth=ground_truth(item),
                index=start_index + len(rows),
                split=split,
                ability="multihop_qa",
                env_kwargs=ENV_KWARGS,
                tools_kwargs={"search": search_kwargs},
                extra={
                    "id": str(item.get("_id", "")),
                    "question": str(item["question"]),
                    "type": str(item.get("type", "")),
                    "level": str(item.get("level", "")),
                    "supporting_titles": sorted({str(fact[0]) for fact in item.get("supporting_facts", [])}),
                },
            )
        )
    return rows


def _input_files(source: Path) -> dict[str, list[Path]]:
    if source.is_file():
        return {"val" if "dev" in source.name else "train": [source]}
    files = sorted(source.glob("*.json")) + sorted(source.glob("*.jsonl"))
    found = {"train": [p for p in files if "train" in p.name], "val": [p for p in files if "dev" in p.name]}
    if not any(found.values()):
        # A folder of other JSON files (our fixtures): all of it is training data, split below.
        found["train"] = files
    if not found["train"] and not found["val"]:
        raise FileNotFoundError(f"{source} holds no HotpotQA .json or .jsonl files")
    return found


def pooled_passages(items: Sequence[dict[str, Any]]) -> list[Passage]:
    """Every context paragraph of ``items``, one per title (HotpotQA repeats paragraphs across questions)."""
    by_title: dict[str, Passage] = {}
    for item in items:
        for title, text in context_passages(item):
            by_title.setdefault(title, (title, text))
    return list(by_title.values())


def prepare(source: Path | None, output: Path, options: PrepareOptions) -> dict[str, Path]:
    files = _input_files(source or FIXTURES)
    train_items = [item for path in files["train"] for item in read_json_records(path)]
    val_items = [item for path in files["val"] for item in read_json_records(path)]
    if not val_items:
        train_items, val_items = split_off(train_items, options.val_fraction, options.seed)
    index_dir: Path | None = None
    if options.corpus:
        corpus = (
            pooled_passages(train_items + val_items)
            if options.corpus == "pooled"
            else read_passages(Path(options.corpus))
        )
        index_dir = write_shared_index(corpus, output / "search_index")
        logger.info("wrote a shared BM25 index over %d passages to %s", len(corpus), index_dir)
    train = to_rows(train_items, "train", 0, index_dir)
    val = to_rows(val_items, "val", len(train), index_dir)
    return write_splits({"train": train, "val": val}, output, limit=options.limit)


MAX_DEMO_SEARCHES = 3


def demonstrate(row: RuleRow) -> Plan | None:
    """Search the question, then each supporting title; answer with the first of the row's answers
    that the passages returned hold (none: the row is dropped) (docs/demonstrations.md#rules)."""
    info = extra_info(row)
    question = str(info.get("question") or "")
    if not question:
        return None
    queries = [question, *(str(title) for title in info.get("supporting_titles") or [])]
    calls = [PlannedCall("search", {"query": query}) for query in queries[:MAX_DEMO_SEARCHES]]
    truth = (row.get("reward_model") or {}).get("ground_truth")
    answers = [truth] if isinstance(truth, str) else [str(a) for a in (truth if truth is not None else [])]

    def answer(results: Sequence[str]) -> str | None:
        found = "\n".join(results).lower()
        return next((f"<answer>{a}</answer>" for a in answers if a and a.lower() in found), None)

    return Plan(calls, answer)
