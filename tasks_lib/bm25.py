"""A small wrapper around ``bm25s`` shared by the recipes that search text (HotpotQA, WebShop)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import bm25s

STOPWORDS = "en"


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    tokens: list[list[str]] = bm25s.tokenize(
        list(texts), stopwords=STOPWORDS, return_ids=False, show_progress=False
    )
    return tokens


class Bm25Index:
    """BM25 over a list of texts; :meth:`search` returns (position, score) for documents that match."""

    def __init__(self, retriever: bm25s.BM25, size: int) -> None:
        self.retriever = retriever
        self.size = size

    @classmethod
    def build(cls, texts: Sequence[str]) -> Bm25Index:
        if not texts:
            raise ValueError("cannot build a BM25 index over no documents")
        retriever = bm25s.BM25()
        retriever.index(_tokens(texts), show_progress=False)
        return cls(retriever, len(texts))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The best ``k`` documents with a positive score, best first."""
        k = max(1, min(k, self.size))
        documents, scores = self.retriever.retrieve(_tokens([query]), k=k, show_progress=False)
        hits = [(int(doc), float(score)) for doc, score in zip(documents[0], scores[0], strict=True)]
        return [(doc, score) for doc, score in hits if score > 0.0]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: Path, size: int) -> Bm25Index:
        if not folder.is_dir():
            raise FileNotFoundError(f"no BM25 index at {folder}")
        retriever = bm25s.BM25.load(str(folder), mmap=True, show_progress=False, verbosity=0)
        return cls(retriever, size)
