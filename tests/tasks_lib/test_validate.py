"""The shared validator: every rejection names its row and column; good files pass."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks_lib import Problem, validate


def good_row(index: int, **overrides: Any) -> dict[str, Any]:
    row = {
        "data_source": "arithmetic",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "5"},
        "extra_info": {"index": index, "split": "train"},
        "agent_name": "agent_env_loop",
        "env_kwargs": json.dumps({"env_type": "tool", "tools": ["calculator"]}),
    }
    row.update(overrides)
    return row


def write(tmp_path: Path, rows: list[dict[str, Any]], name: str = "data.parquet", **kwargs: Any) -> Path:
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path, **kwargs)
    return path


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def test_it_accepts_rows_in_the_data_contract(tmp_path: Path) -> None:
    assert validate(write(tmp_path, [good_row(0), good_row(1)])) == []


def test_it_accepts_an_arrow_table_and_a_file_object(tmp_path: Path) -> None:
    table = pa.Table.from_pylist([good_row(0), good_row(1)])
    assert validate(table) == []
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    buffer.seek(0)
    assert validate(buffer) == []


def test_it_rejects_a_missing_column(tmp_path: Path) -> None:
    rows = [{k: v for k, v in good_row(0).items() if k != "reward_model"}]
    problem = only(validate(write(tmp_path, rows)))
    assert (problem.row, problem.column) == (None, "reward_model")
    assert str(problem) == "column reward_model: missing required column"


def test_it_rejects_a_prompt_that_is_a_string(tmp_path: Path) -> None:
    rows = [good_row(0, prompt="What is 2 + 3?"), good_row(1, prompt="What is 4 + 4?")]
    problem = only(validate(write(tmp_path, rows)))  # the same cause in both rows: reported once
    assert (problem.row, problem.column, problem.count) == (0, "prompt", 2)
    assert str(problem).startswith("rows 0\u20131 (2 rows), column prompt: is a string")


def test_it_rejects_an_unknown_role(tmp_path: Path) -> None:
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "narrator", "content": "Once upon a time"}]
    problem = only(validate(write(tmp_path, [good_row(0), good_row(1, prompt=prompt)])))
    assert (problem.row, problem.column) == (1, "prompt[1].role")
    assert "narrator" in str(problem) and str(problem).startswith("row 1, column prompt[1].role")


@pytest.mark.parametrize("truth", [None, ""])
def test_it_rejects_a_missing_ground_truth(tmp_path: Path, truth: str | None) -> None:
    rows = [good_row(0), good_row(1), good_row(2, reward_model={"style": "rule", "ground_truth": truth})]
    problem = only(validate(write(tmp_path, rows)))
    assert (problem.row, problem.column) == (2, "reward_model.ground_truth")
    assert str(problem) == "row 2, column reward_model.ground_truth: missing ground truth"


def test_it_rejects_a_duplicate_index_even_across_row_groups(tmp_path: Path) -> None:
    rows = [good_row(i) for i in range(10)] + [good_row(3)]
    path = write(tmp_path, rows, row_group_size=4)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    problem = only(validate(path, batch_size=4))
    assert (problem.row, problem.column) == (10, "extra_info.index")
    assert "duplicate index 3 (first used by row 3)" in str(problem)


def test_it_rejects_a_row_without_an_index(tmp_path: Path) -> None:
    problem = only(validate(write(tmp_path, [good_row(0), good_row(1, extra_info={"split": "train"})])))
    assert (problem.row, problem.column) == (1, "extra_info.index")


def test_it_rejects_an_agent_name_that_is_not_registered(tmp_path: Path) -> None:
    problem = only(validate(write(tmp_path, [good_row(0, agent_name="telepathy_loop")])))
    assert (problem.row, problem.column) == (0, "agent_name")
    assert "'telepathy_loop' is not registered" in str(problem) and "agent_env_loop" in str(problem)


def test_it_rejects_a_tool_that_is_not_registered(tmp_path: Path) -> None:
    env_kwargs = json.dumps({"env_type": "tool", "tools": ["calculator", "crystal_ball"]})
    problem = only(validate(write(tmp_path, [good_row(0), good_row(1, env_kwargs=env_kwargs)])))
    assert (problem.row, problem.column) == (1, "env_kwargs.tools")
    assert "'crystal_ball' is not registered" in str(problem)


def test_it_rejects_tools_kwargs_for_a_tool_that_is_not_registered(tmp_path: Path) -> None:
    extra_info = {"index": 0, "tools_kwargs": {"crystal_ball": {"depth": 3}}}
    problem = only(validate(write(tmp_path, [good_row(0, extra_info=extra_info)])))
    assert (problem.row, problem.column) == (0, "extra_info.tools_kwargs.crystal_ball")


def test_it_rejects_an_env_type_that_is_not_registered(tmp_path: Path) -> None:
    env_kwargs = json.dumps({"env_type": "holodeck"})
    problem = only(validate(write(tmp_path, [good_row(0, env_kwargs=env_kwargs)])))
    assert (problem.row, problem.column) == (0, "env_kwargs.env_type")


def test_it_rejects_a_data_source_without_a_reward_function(tmp_path: Path) -> None:
    problem = only(validate(write(tmp_path, [good_row(0, data_source="astrology")])))
    assert (problem.row, problem.column) == (0, "data_source")
    assert "no reward function is registered for 'astrology'" in str(problem)


def test_it_rejects_text_that_is_not_utf8(tmp_path: Path) -> None:
    table = pa.Table.from_pylist([good_row(0), good_row(1), good_row(2)])
    # Arrow checks UTF-8 only when asked; view() lets the bad bytes through, as a foreign writer might.
    ability = pa.array([b"math", b"m\xffth", b"math"], pa.binary()).view(pa.string())
    table = table.set_column(table.schema.get_field_index("ability"), "ability", ability)
    path = tmp_path / "latin1.parquet"
    pq.write_table(table, path)
    problem = only(validate(path))
    assert (problem.row, problem.column) == (1, "ability")
    assert str(problem) == "row 1, column ability: text is not valid UTF-8"


def test_it_rejects_invalid_utf8_inside_a_prompt_message(tmp_path: Path) -> None:
    contents = pa.array([b"ok", b"caf\xe9"], pa.binary()).view(pa.string())
    roles = pa.array(["user", "user"])
    messages = pa.StructArray.from_arrays([roles, contents], names=["role", "content"])
    prompt = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), messages)
    table = pa.Table.from_pylist([good_row(0), good_row(1)])
    table = table.set_column(table.schema.get_field_index("prompt"), "prompt", prompt)
    pq.write_table(table, tmp_path / "prompt.parquet")
    problem = only(validate(tmp_path / "prompt.parquet"))
    assert (problem.row, problem.column) == (1, "prompt")


def test_it_rejects_a_truncated_parquet_file(tmp_path: Path) -> None:
    path = write(tmp_path, [good_row(i) for i in range(50)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    problem = only(validate(path))
    assert (problem.row, problem.column) == (None, None)
    assert str(problem).startswith("file: cannot read the parquet file (truncated or not parquet)")


def test_it_rejects_a_file_that_is_not_parquet(tmp_path: Path) -> None:
    path = tmp_path / "notes.parquet"
    path.write_text("data_source,prompt\ngsm8k,hello\n")
    assert str(only(validate(path))).startswith("file: cannot read the parquet file")


def test_a_cause_shared_by_every_row_is_reported_once_with_the_rows_it_covers(tmp_path: Path) -> None:
    rows = [good_row(i, data_source="openai/gsm8k_v2") for i in range(30)]
    problem = only(validate(write(tmp_path, rows)))
    assert (problem.where, problem.column, problem.data_source) == (
        "rows 0\u201329 (30 rows)",
        "data_source",
        "openai/gsm8k_v2",
    )
    assert "map it to a reward function" in problem.message
    assert str(problem).startswith(
        "rows 0\u201329 (30 rows), column data_source: no reward function is registered"
    )


def test_a_real_row_error_is_never_buried_and_the_list_is_capped_with_a_count(tmp_path: Path) -> None:
    no_truth = {"style": "rule", "ground_truth": ""}
    rows = [good_row(i, data_source="mystery", reward_model=no_truth) for i in range(40)]
    rows += [good_row(40 + i, extra_info={"index": i}) for i in range(8)]  # 8 duplicate indexes, each its own
    problems = validate(write(tmp_path, rows), max_problems=5)
    assert [p.where for p in problems[:2]] == ["rows 0\u201339 (40 rows)", "rows 0\u201339 (40 rows)"]
    assert [p.row for p in problems[2:5]] == [40, 41, 42] and "duplicate index 0" in problems[2].message
    assert str(problems[5]) == "file: … and 5 more problems not listed; fix the ones above first"


def test_a_mapping_routes_an_unknown_data_source_and_other_projects_names_need_none(tmp_path: Path) -> None:
    from tasks_lib.validate import Context, unrouted_data_sources

    path = write(tmp_path, [good_row(0, data_source="mystery"), good_row(1, data_source="mystery")])
    assert unrouted_data_sources(validate(path)) == ["mystery"]
    assert (
        validate(path, context=Context(reward_map={"mystery": "team_reward"}, team_rewards=["team_reward"]))
        == []
    )
    [gone] = validate(path, context=Context(reward_map={"mystery": "deleted_reward"}))
    assert "'deleted_reward', which does not exist" in gone.message
    native = [good_row(0, data_source="openai/gsm8k", agent_name="tool_agent"),
              good_row(1, data_source="alfworld_valid_seen", agent_name="alfworld_agent", env_kwargs=None),
              good_row(2, data_source="searchR1_nq", agent_name="single_turn_agent", env_kwargs=None)]  # fmt: skip
    assert validate(write(tmp_path, native, name="native.parquet")) == []


def test_need_tools_kwargs_without_tools_kwargs_is_refused(tmp_path: Path) -> None:
    row = good_row(0, extra_info={"index": 0, "need_tools_kwargs": True})
    problem = only(validate(write(tmp_path, [row])))
    assert (problem.row, problem.column) == (0, "extra_info.tools_kwargs")


def test_it_refuses_a_footer_claiming_200_mb_before_reading_it(tmp_path: Path) -> None:
    path = write(tmp_path, [good_row(0)])
    data = bytearray(path.read_bytes())
    data[-8:-4] = (200 * 2**20).to_bytes(4, "little")  # the footer length parquet writes before PAR1
    path.write_bytes(bytes(data))
    problem = only(validate(path))
    assert "footer is 200 MiB" in str(problem)
    assert "footer is 200 MiB" in str(only(validate(io.BytesIO(bytes(data)))))


def demonstration(index: int) -> dict[str, Any]:
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
    return {
        "messages": [
            {"role": "user", "content": f"What is 2 + 3? ({index})"},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": "5"},
            {"role": "assistant", "content": "<answer>5</answer>"},
        ],
        "tools": json.dumps([{"name": "calculator", "parameters": {"type": "object"}}]),
    }


def test_a_demonstrations_file_in_the_chat_messages_layout_is_valid(tmp_path: Path) -> None:
    assert validate(write(tmp_path, [demonstration(i) for i in range(3)])) == []


def test_a_bad_demonstration_names_its_row_and_the_messages_column(tmp_path: Path) -> None:
    rows = [demonstration(i) for i in range(3)]
    rows[2]["messages"] = rows[2]["messages"][:3]  # ends with the tool result
    problem = only(validate(write(tmp_path, rows)))
    assert (problem.row, problem.column) == (2, "messages")
    assert "last message must be the assistant's answer" in problem.message


def test_demonstrations_with_tools_that_are_not_schemas_are_refused_on_tools(tmp_path: Path) -> None:
    rows = [{**demonstration(0), "tools": '{"name": "calculator"}'}]
    assert only(validate(write(tmp_path, rows))).column == "tools"
