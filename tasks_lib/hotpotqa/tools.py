"""The search tool: top-k passages from a BM25 index (bm25s).

Where the passages come from is per row (``extra_info.tools_kwargs.search``): ``passages``, the
question's own context paragraphs (HotpotQA's distractor setting), or ``index_dir``, a shared index
written by ``prepare hotpotqa --corpus`` (the dataset's pooled paragraphs or a user corpus JSONL).
Indexes are built or loaded once per process and cached.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tasks_lib.bm25 import Bm25Index
from trainer.tools import BaseTool, ToolResult, one_string_parameter, register_tool

DEFAULT_TOP_K = 3
PASSAGES_FILE = "passages.jsonl"
INDEX_FOLDER = "bm25"

Passage = tuple[str, str]  # (title, text)


def passage_text(title: str, text: str) -> str:
    return f"{title}\n{text}"


@lru_cache(maxsize=512)
def _row_index(passages: tuple[Passage, ...]) -> Bm25Index:
    return Bm25Index.build([passage_text(title, text) for title, text in passages])


@lru_cache(maxsize=8)
def _shared_index(index_dir: str) -> tuple[Bm25Index, tuple[Passage, ...]]:
    folder = Path(index_dir)
    passages = tuple(read_passages(folder / PASSAGES_FILE))
    return Bm25Index.load(folder / INDEX_FOLDER, len(passages)), passages


def read_passages(path: Path) -> list[Passage]:
    """A corpus JSONL: one object per line with ``title`` and ``text`` (or pyserini's ``contents``)."""
    passages = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            if "text" in record:
                passages.append((str(record.get("title", "")), str(record["text"])))
            elif "contents" in record:
                title, _, text = str(record["contents"]).partition("\n")
                passages.append((title, text))
            else:
                raise ValueError(f"{path} line {number}: expected 'title' and 'text' (or 'contents')")
    if not passages:
        raise ValueError(f"{path} holds no passages")
    return passages


def write_shared_index(passages: Sequence[Passage], folder: Path) -> Path:
    """Write ``passages.jsonl`` and its BM25 index under ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / PASSAGES_FILE).open("w", encoding="utf-8") as handle:
        for title, text in passages:
            handle.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
    Bm25Index.build([passage_text(title, text) for title, text in passages]).save(folder / INDEX_FOLDER)
    return folder


def search(query: str, ctx: Mapping[str, Any]) -> list[tuple[Passage, float]]:
    """The top passages for ``query`` from the index that ``ctx`` names."""
    top_k = int(ctx.get("top_k") or DEFAULT_TOP_K)
    if ctx.get("passages"):
        passages = tuple((str(p["title"]), str(p["text"])) for p in ctx["passages"])
        index = _row_index(passages)
    elif ctx.get("index_dir"):
        index, passages = _shared_index(str(ctx["index_dir"]))
    else:
        raise ValueError("the search tool has no corpus: give tools_kwargs.search.passages or .index_dir")
    return [(passages[doc], score) for doc, score in index.search(query, top_k)]


def format_results(query: str, hits: Sequence[tuple[Passage, float]]) -> str:
    if not hits:
        return f"No passages found for {query!r}."
    return "\n".join(f"Doc {i} (Title: {title}) {text}" for i, ((title, text), _) in enumerate(hits, start=1))


@register_tool
class SearchTool(BaseTool):
    name = "search"
    description = "Search the passage collection and return the most relevant passages."
    parameters = one_string_parameter("query", "What to search for.")

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        hits = search(str(args["query"]), ctx)
        return ToolResult(
            text=format_results(args["query"], hits), info={"titles": [title for (title, _), _ in hits]}
        )
