"""HotpotQA: our fixture set, the BM25 search tool, the EM/F1 reward, and episodes through ToolEnv."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import validate
from tasks_lib.hotpotqa.data import FIXTURES, context_passages
from tasks_lib.hotpotqa.reward import compute_score, extract_answer, normalize_answer
from tasks_lib.hotpotqa.tools import search
from tests.tasks_lib.helpers import (
    last_text,
    make_env,
    malformed_policy,
    play,
    random_text_policy,
    read_rows,
    scripted,
    tool_call,
)
from trainer.mdp import Action

Prepared = Callable[..., dict[str, Path]]


def fixture_items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads((FIXTURES / "hotpot_fixture.json").read_text(encoding="utf-8"))
    return items


def test_the_fixture_set_has_twenty_questions_in_hotpotqas_shape_whose_answers_its_facts_support() -> None:
    items = fixture_items()
    assert len(items) >= 20
    assert len({item["_id"] for item in items}) == len(items)
    for item in items:
        assert {"_id", "question", "answer", "supporting_facts", "context", "type", "level"} <= set(item)
        context = {title: sentences for title, sentences in item["context"]}
        assert all(isinstance(s, str) for sentences in context.values() for s in sentences)
        facts = [context[title][sentence] for title, sentence in item["supporting_facts"]]
        assert len(facts) >= 2
        # The answer is in a supporting sentence or title (or, for a comparison, in the question),
        # so every question can be answered from its own context.
        if item["answer"] not in ("yes", "no"):
            where = normalize_answer(" ".join([*facts, *(title for title, _ in item["supporting_facts"])]))
            if item["type"] == "comparison":
                where += " " + normalize_answer(item["question"])
            answers = [item["answer"], *item.get("answer_aliases", [])]
            assert any(normalize_answer(a) in where for a in answers), item["_id"]


@pytest.mark.parametrize(
    ("response", "truth", "score", "f1"),
    [
        ("<answer>The Skarn Range</answer>", ["Skarn Range"], 1.0, 1.0),
        ("<answer>skarn range!</answer>", ["Skarn Range"], 1.0, 1.0),
        ("<answer>Skarn</answer>", ["Skarn Range", "Skarn"], 1.0, 1.0),
        ("<answer>the Skarn mountains</answer>", ["Skarn Range"], 0.0, 0.5),
        ("Skarn Range", ["Skarn Range"], 0.0, 0.0),
        ("<answer>wrong</answer> <answer>Kesh</answer>", "Kesh", 1.0, 1.0),
    ],
)
def test_the_reward_is_normalised_exact_match_with_aliases_and_logs_f1(
    response: str, truth: Any, score: float, f1: float
) -> None:
    result = compute_score(response, truth, {})
    assert result["score"] == score
    assert result["f1"] == pytest.approx(f1)


def test_answers_come_from_the_last_answer_tags() -> None:
    assert extract_answer("<answer> a </answer> then <answer>b</answer>") == "b"
    assert extract_answer("no tags") is None


def test_search_ranks_the_passage_that_holds_the_fact_first() -> None:
    item = next(i for i in fixture_items() if i["_id"] == "fx0001")
    passages = [{"title": t, "text": x} for t, x in context_passages(item)]
    hits = search("Hollowgate Studios opened", {"passages": passages, "top_k": 2})
    assert hits[0][0][0] == "Hollowgate Studios"
    assert len(hits) <= 2
    assert search("zzzz qqqq", {"passages": passages}) == []


def test_prepare_gives_each_row_its_own_context_as_the_corpus(prepared: Prepared) -> None:
    splits = prepared("hotpotqa")
    rows = [row for path in splits.values() for row in read_rows(path)]
    assert len(rows) == len(fixture_items()) and all(validate(path) == [] for path in splits.values())
    by_id = {item["_id"]: item for item in fixture_items()}
    for row in rows:
        item = by_id[row["extra_info"]["id"]]
        assert row["reward_model"]["ground_truth"] == [item["answer"], *item.get("answer_aliases", [])]
        passages = row["extra_info"]["tools_kwargs"]["search"]["passages"]
        assert [p["title"] for p in passages] == [title for title, _ in item["context"]]


def test_prepare_with_a_pooled_corpus_writes_one_shared_index(prepared: Prepared) -> None:
    splits = prepared("hotpotqa", corpus="pooled")
    rows = read_rows(splits["train"])
    index_dir = rows[0]["extra_info"]["tools_kwargs"]["search"]["index_dir"]
    assert all(row["extra_info"]["tools_kwargs"]["search"]["index_dir"] == index_dir for row in rows)
    assert (Path(index_dir) / "passages.jsonl").read_text(encoding="utf-8").count("\n") == 28
    hits = search("Mount Tivel first climbed", {"index_dir": index_dir, "top_k": 3})
    assert hits[0][0][0] == "Mount Tivel"


def test_prepare_accepts_a_user_corpus_jsonl(prepared: Prepared, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"title": "Kesh", "text": "Kesh is a port city."}\n{"contents": "Alda\\nThe Alda is a river."}\n',
        encoding="utf-8",
    )
    rows = read_rows(prepared("hotpotqa", corpus=str(corpus))["train"])
    ctx = rows[0]["extra_info"]["tools_kwargs"]["search"]
    assert [title for (title, _), _ in search("river", ctx)] == ["Alda"]


def oracle(row: dict[str, Any]) -> list[str]:
    titles = row["extra_info"]["supporting_titles"]
    return [
        *(tool_call("search", query=title) for title in titles),
        f"<answer>{row['reward_model']['ground_truth'][0]}</answer>",
    ]


@pytest.mark.parametrize("corpus", [None, "pooled"])
def test_an_oracle_that_searches_the_supporting_titles_gets_full_reward(
    prepared: Prepared, corpus: str | None
) -> None:
    for path in prepared("hotpotqa", corpus=corpus).values():
        for row in read_rows(path):
            episode = play(row, scripted(oracle(row)), max_steps=6)
            assert episode.rewards[-1] == 1.0 and episode.total == 1.0
            found = [
                title
                for info in episode.infos
                for call in info["tool_calls"]
                for title in call.info["titles"]
            ]
            assert set(row["extra_info"]["supporting_titles"]) <= set(found)


def test_search_results_reach_the_model_as_a_tool_response(prepared: Prepared) -> None:
    row = read_rows(prepared("hotpotqa")["train"])[0]
    env = make_env(row)
    env.reset(**row)
    observation, reward, done, _ = asyncio.run(
        env.step(Action(tool_call("search", query=row["extra_info"]["question"])))
    )
    assert last_text(observation).startswith("<tool_response>\nDoc 1 (Title: ")
    assert (reward, done) == (0.0, False)


def test_random_and_malformed_policies_earn_nothing_and_never_crash(prepared: Prepared) -> None:
    rows = read_rows(prepared("hotpotqa")["train"])
    for seed, row in enumerate(rows):
        assert play(row, random_text_policy(seed, "search", "query"), max_steps=5).total == 0.0
        assert play(row, malformed_policy("<answer>no idea</answer>"), max_steps=12).total == 0.0
