"""Our flows inside verl's AgentLoopBase, token in / token out through a fake server manager."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from scripted_loop import CALL, SAMPLING, ScriptedServer, make_loop, verl_sample
from transformers import GenerationConfig
from verl.workers.rollout.replica import TokenOutput

from trainer.backends.torch.loop import setup_run
from trainer.backends.verl import agent_loop, worker
from trainer.backends.verl.agent_loop import write_agent_loop_config
from trainer.config import RunConfig
from trainer.flows import FLOWS
from trainer.models import load_tokenizer
from trainer.report.reporters import JsonlReporter, MemoryReporter, read_jsonl


class TinyModelServer:
    """verl's server manager over a real tiny model: sampled token in / token out."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.generator = torch.Generator().manual_seed(0)

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kw: Any
    ) -> TokenOutput:
        ids = torch.tensor([prompt_ids])
        tokens: list[int] = []
        log_probs: list[float] = []
        with torch.no_grad():
            for _ in range(min(sampling_params["max_tokens"], 12)):
                logits = self.model(torch.cat([ids, torch.tensor([tokens], dtype=torch.long)], dim=1)).logits[
                    0, -1
                ]
                probs = torch.softmax(logits / sampling_params["temperature"], dim=-1)
                token = int(torch.multinomial(probs, 1, generator=self.generator))
                tokens.append(token)
                log_probs.append(float(torch.log(probs[token])))
        return TokenOutput(token_ids=tokens, log_probs=log_probs)


def test_a_tool_calling_trajectory_becomes_one_verl_row_with_tool_tokens_masked(
    tmp_path: Path, smol_tokenizer: Any, reporter: MemoryReporter, bonus_tool: None
) -> None:
    server = ScriptedServer(smol_tokenizer, [CALL, "The answer is 4"])
    loop = make_loop(tmp_path, smol_tokenizer, server)
    output = asyncio.run(loop.run(dict(SAMPLING), **verl_sample()))

    first, second = server.responses
    assert output.prompt_ids == server.prompts[0]
    response, mask = output.response_ids, output.response_mask
    observation = response[len(first) : len(response) - len(second)]
    assert response[: len(first)] == first and response[len(response) - len(second) :] == second
    assert mask == [1] * len(first) + [0] * len(observation) + [1] * len(second)
    assert "echo: hi" in smol_tokenizer.decode(observation)
    # The second call continued the trajectory's own tokens, not a re-tokenised copy of the first answer.
    assert server.prompts[1] == output.prompt_ids + response[: len(response) - len(second)]
    assert output.response_logprobs == [-0.5] * len(first) + [0.0] * len(observation) + [-0.5] * len(second)

    # Step rewards: the tool's 0.25, then the reward function's 1.0 for the final answer.
    assert output.extra_fields["turn_scores"] == [0.25, 1.0]
    assert output.reward_score == 1.25
    scores = output.as_dict()["rm_scores"]
    assert scores[len(first) - 1].item() == 0.25 and scores[len(response) - 1].item() == 1.0
    assert scores.sum().item() == 1.25
    assert output.num_turns == 5

    [(step, [trajectory])] = reporter.trajectories
    assert step == 5 and trajectory.group_id == "prompt-uid-1" and trajectory.rollout_index == 1
    assert [s.reward for s in trajectory.steps] == [0.25, 1.0]
    assert [call.name for call in trajectory.steps[0].tool_calls] == ["bonus"]
    assert trajectory.steps[0].tool_calls[0].result == "echo: hi"


def test_the_trajectory_reaches_a_jsonl_reporter(
    tmp_path: Path, smol_tokenizer: Any, bonus_tool: None
) -> None:
    jsonl = JsonlReporter(tmp_path / "events.jsonl")
    worker.set_reporter(jsonl)
    try:
        server = ScriptedServer(smol_tokenizer, [CALL, "4"])
        asyncio.run(make_loop(tmp_path, smol_tokenizer, server).run(dict(SAMPLING), **verl_sample()))
    finally:
        worker.set_reporter(None)
        jsonl.close()
    [event] = read_jsonl(tmp_path / "events.jsonl")
    steps = event["trajectories"][0]["steps"]
    assert [s["reward"] for s in steps] == [0.25, 1.0]
    assert steps[0]["tool_calls"][0]["name"] == "bonus"


def test_a_sliding_window_flow_is_refused_with_a_clear_error(
    tmp_path: Path, smol_tokenizer: Any, reporter: MemoryReporter, bonus_tool: None
) -> None:
    # RunConfig refuses a sliding window on verl (VerlBackend.problems); the agent loop's own guard
    # still stops any flow whose prompts do not grow, here the same policy in a config checked as torch's.
    server = ScriptedServer(smol_tokenizer, [CALL, CALL.replace("hi", "there"), "4"])
    settings = {"rollout.context_policy": "sliding_window", "rollout.window": 1, "backend": "torch",
                "resources.gpus_per_node": 0}  # fmt: skip
    loop = make_loop(tmp_path, smol_tokenizer, server, **settings)
    with pytest.raises(agent_loop.ContextNotAppendOnlyError, match="context_policy append"):
        asyncio.run(loop.run(dict(SAMPLING), **verl_sample()))


def test_the_response_budget_ends_the_episode(
    tmp_path: Path, smol_tokenizer: Any, reporter: MemoryReporter, bonus_tool: None
) -> None:
    server = ScriptedServer(smol_tokenizer, [CALL, CALL, CALL])
    loop = make_loop(
        tmp_path, smol_tokenizer, server, **{"data.max_response_length": 40, "rollout.max_new_tokens": 30}
    )
    loop.rollout_config.response_length = 40
    output = asyncio.run(loop.run(dict(SAMPLING), **verl_sample()))
    assert len(output.response_ids) <= 40
    assert len(output.response_ids) == len(output.response_mask)


def test_a_real_tiny_model_samples_through_the_server_manager(
    tmp_path: Path, smol_tokenizer: Any, tiny_model_dir: Path, reporter: MemoryReporter, bonus_tool: None
) -> None:
    server = TinyModelServer(tiny_model_dir)
    output = asyncio.run(make_loop(tmp_path, smol_tokenizer, server).run(dict(SAMPLING), **verl_sample()))
    [(_, [trajectory])] = reporter.trajectories
    generated = [token for step in trajectory.steps for token in step.response_ids]
    model_tokens = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == 1]
    assert model_tokens == generated and len(generated) > 0
    assert all(lp <= 0.0 for lp in output.response_logprobs or [])
    assert output.reward_score == sum(step.reward or 0.0 for step in trajectory.steps)


def test_the_agent_loop_yaml_lists_every_flow(tmp_path: Path) -> None:
    path = write_agent_loop_config(tmp_path / "loops.yaml", tmp_path / "run_config.json")
    entries = yaml.safe_load(path.read_text())
    assert [entry["name"] for entry in entries] == [*FLOWS.names(), *FLOWS.aliases()]
    assert {entry["_target_"] for entry in entries} == {"trainer.backends.verl.agent_loop.StudioAgentLoop"}
    # verl's and Agent-R1's agent names run our flows (tool_agent is our env loop).
    assert {entry["name"]: entry["flow"] for entry in entries}["tool_agent"] == "agent_env_loop"
    assert all(entry["flow"] == FLOWS.canonical(entry["name"]) for entry in entries)


def test_both_backends_end_a_turn_on_the_same_tokens(
    tmp_path: Path, tiny_model_dir: Path, rows_file: Callable[..., Path]
) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    GenerationConfig(eos_token_id=[2, 17]).save_pretrained(model)  # a second end-of-turn id
    config = RunConfig.from_preset(
        "grpo",
        **{"model.path": str(model), "data.train_path": str(rows_file("rows.parquet", 2, "contains"))},
    )
    torch_stops = setup_run(config).engine.stop_token_ids
    verl_stops = agent_loop.turn_end_tokens(load_tokenizer(model))
    assert set(torch_stops) == verl_stops and 17 in verl_stops


@pytest.mark.parametrize(("rule", "expected"), [("verl", 0.0), ("lenient", 1.0)])
def test_the_agent_loop_scores_verls_data_sources_by_the_runs_reward_rule(
    tmp_path: Path,
    smol_tokenizer: Any,
    reporter: MemoryReporter,
    bonus_tool: None,
    rule: str,
    expected: float,
) -> None:
    from tasks_lib.registry import load_recipes

    load_recipes()
    server = ScriptedServer(smol_tokenizer, ["The answer is 72"])
    loop = make_loop(tmp_path, smol_tokenizer, server, **{"data.reward_rule": rule})
    sample = {**verl_sample(), "data_source": "openai/gsm8k", "reward_model": {"ground_truth": "72"}}
    output = asyncio.run(loop.run(dict(SAMPLING), **sample))
    assert output.reward_score == expected
