"""The command line: list, prepare (from fixtures, a raw file, the package) and validate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks_lib.__main__ import main
from tasks_lib.gsm8k.data import FIXTURES as GSM8K_FIXTURES


def test_list_names_every_task_with_its_input_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("arithmetic", "gsm8k", "hotpotqa", "alfworld", "webshop"):
        assert f"\n{name}\n" in f"\n{out}"
    assert "json_2.1.1" in out and "env: webshop  tools: web_action  max_steps: 15" in out
    assert "levels: small (small sums), multiply (3-4-digit multiplication)" in out


def test_prepare_writes_splits_and_validates_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["prepare", "gsm8k", "--input", str(GSM8K_FIXTURES / "train.jsonl"), "--output", str(tmp_path)])
        == 0
    )
    out = capsys.readouterr().out
    assert f"train: {tmp_path / 'train.parquet'} (8 rows)" in out
    assert f"val: {tmp_path / 'val.parquet'} (1 rows)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet", "val.parquet"]


def test_prepare_from_fixtures_with_a_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prepare", "hotpotqa", "--fixtures", "--output", str(tmp_path), "--limit", "5"]) == 0
    assert pq.ParquetFile(tmp_path / "train.parquet").metadata.num_rows == 5


def test_a_recipe_refuses_the_options_it_does_not_declare(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--from-package: Only the gsm8k recipe has packaged items"):
        main(["prepare", "webshop", "--from-package", "--output", str(tmp_path)])
    with pytest.raises(SystemExit, match="--level: Only the arithmetic recipe has levels"):
        main(["prepare", "lookup", "--level", "multiply", "--output", str(tmp_path)])
    with pytest.raises(SystemExit, match="no level 'huge'; its levels: small, multiply"):
        main(["prepare", "arithmetic", "--level", "huge", "--output", str(tmp_path)])
    with pytest.raises(SystemExit) as both:  # every refusal at once, not only the first
        main(["prepare", "lookup", "--from-package", "--level", "small", "--output", str(tmp_path)])
    assert str(both.value).splitlines() == [
        "--from-package: Only the gsm8k recipe has packaged items.",
        "--level: Only the arithmetic recipe has levels.",
    ]
    assert not any(tmp_path.iterdir())


def test_an_unknown_task_lists_the_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prepare", "mathbench", "--output", str(tmp_path)]) == 2
    assert "choose one of: alfworld, arithmetic, gsm8k, hotpotqa, lookup, webshop" in capsys.readouterr().err


def test_a_missing_input_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["prepare", "alfworld", "--input", str(tmp_path / "nowhere"), "--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_validate_exits_nonzero_and_prints_each_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.parquet"
    rows = [
        {
            "data_source": "gsm8k",
            "prompt": "What is 2 + 2?",
            "reward_model": {"style": "rule", "ground_truth": "4"},
            "extra_info": {"index": 0},
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), bad)
    assert main(["validate", str(bad)]) == 1
    assert f"{bad}: row 0, column prompt: is a string" in capsys.readouterr().out


@pytest.mark.slow
def test_the_module_runs_as_a_program(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tasks_lib", "prepare", "webshop", "--output", str(tmp_path), "--size", "20"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "train: " in result.stdout and "(18 rows)" in result.stdout
    goals = [json.loads(line) for line in (tmp_path / "goals.jsonl").read_text().splitlines()]
    assert len(goals) == 20
    check = subprocess.run(
        [sys.executable, "-m", "tasks_lib", "validate", str(tmp_path / "train.parquet")], timeout=300
    )
    assert check.returncode == 0
