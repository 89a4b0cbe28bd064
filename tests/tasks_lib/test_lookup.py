"""The lookup recipe: answers only behind a loopback service, and a training step that uses it; the
arithmetic recipe's multiplication level."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import validate
from tasks_lib.arithmetic.data import generate as generate_sums
from tasks_lib.lookup.data import generate
from tasks_lib.lookup.service import service_url
from tasks_lib.lookup.tools import LookupTool, fetch
from tests.tasks_lib.helpers import play, read_rows, tool_call
from trainer.mdp import Observation, ToolCallRecord
from trainer.tools import run_tool_call

Prepared = Callable[..., dict[str, Path]]


def test_the_service_listens_on_loopback_and_serves_every_generated_key() -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", service_url())
    for item in generate(20, seed=5):
        assert fetch(5, item.key) == item.value
    assert generate(20, seed=5) == generate(20, seed=5) != generate(20, seed=6)


def test_an_unknown_key_is_a_tool_error_that_the_model_reads(caplog: pytest.LogCaptureFixture) -> None:
    record = ToolCallRecord(name="lookup", arguments={"key": "no-such-key"})
    with caplog.at_level(logging.INFO, logger="trainer.tools.base"):
        done = asyncio.run(run_tool_call(record, {"lookup": LookupTool()}, timeout_s=10, ctx={"table": 0}))
    assert done.error == "execution" and "no entry for the key 'no-such-key'" in done.result
    # The model asked for a key that is not there: one line in the log, not a traceback per call.
    (said,) = [r for r in caplog.records if r.name == "trainer.tools.base"]
    assert said.levelno == logging.INFO and said.exc_info is None and "no-such-key" in said.getMessage()


def test_prepared_rows_are_valid_and_pay_only_a_policy_that_uses_the_tool(prepared: Prepared) -> None:
    splits = prepared("lookup", fixtures=False, size=30)
    assert validate(splits["train"]) == []
    rows = read_rows(splits["train"])

    def with_tool(observation: Observation) -> str:
        last = observation.messages[-1]["content"]
        if "<tool_response>" in last:
            return f"Answer: {last.split()[1]}"
        return tool_call("lookup", key=re.search(r"key (\S+)\?", last).group(1))  # type: ignore[union-attr]

    def guesser(observation: Observation) -> str:
        return "Answer: 123456"

    assert [play(row, with_tool).total for row in rows] == [1.0] * len(rows)
    assert sum(play(row, guesser).total for row in rows) == 0.0


def test_the_multiply_level_makes_products_of_three_and_four_digit_numbers() -> None:
    items = generate_sums(50, seed=1, level="multiply")
    for item in items:
        left, right = (int(n) for n in item.expression.split(" * "))
        assert 100 <= left <= 9999 and 100 <= right <= 999 and item.answer == str(left * right)
    with pytest.raises(ValueError, match="unknown arithmetic level 'huge'"):
        generate_sums(5, level="huge")


@pytest.mark.slow
def test_a_training_step_on_a_tiny_model_calls_the_lookup_tool_end_to_end(
    prepared: Prepared, smol_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer.backends.torch.loop import setup_run, train_step
    from trainer.config import RunConfig
    from trainer.llm import Generation, SamplingParams
    from trainer.models import tiny_model
    from trainer.report.reporters import MemoryReporter

    splits = prepared("lookup", fixtures=True)
    config = RunConfig.from_preset(
        "grpo",
        **{
            "task": "lookup",
            "model.path": str(tiny_model(tmp_path / "model", smol_tokenizer, seed=0)),
            "data.train_path": str(splits["train"]),
            "rollout.n": 2,
            "trainer.batch_size": 2,
            "optim.mini_batch_size": 4,
            "trainer.device": "cpu",
        },
    )
    run = setup_run(config)

    async def scripted(prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        # The LLM seam: call the tool on the first turn, answer with its result on the second.
        prompt = smol_tokenizer.decode(prompt_ids)
        if "<tool_response>" in prompt:
            text = "Answer: " + prompt.rsplit("<tool_response>\n", 1)[1].split("\n", 1)[0]
        else:
            text = tool_call("lookup", key=re.findall(r"key (\S+)\?", prompt)[-1])
        ids = [*smol_tokenizer.encode(text, add_special_tokens=False), smol_tokenizer.eos_token_id]
        return Generation(token_ids=ids, log_probs=[-1.0] * len(ids), finish_reason="stop")

    monkeypatch.setattr(run.engine, "generate", scripted)
    reporter = MemoryReporter()
    metrics = train_step(run, 1, reporter)

    assert metrics["reward/mean"] == 1.0
    assert (metrics["tools/call_rate"], metrics["tools/well_formed_rate"], metrics["tools/success_rate"]) == (
        1.0,
        1.0,
        1.0,
    )
    calls = [c for t in reporter.trajectories[0][1] for s in t.steps for c in s.tool_calls]
    assert len(calls) == 4 and all(c.name == "lookup" and c.error is None for c in calls)
