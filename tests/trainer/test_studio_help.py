"""`studio --help` says how `--set` names a config field (docs/cli.md#field-paths)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trainer.studio.cli import main


@pytest.mark.parametrize("command", [["experiments", "create"], ["sweep", "create"]])
def test_the_help_of_set_says_that_a_field_is_named_by_its_dotted_path(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "PATH is a config field's dotted path, section.field: rollout.tools" in text
    assert "the sections: model, data, rollout, algorithm, optim, trainer" in text
    assert """--set 'rollout.tools=["calculator"]'""" in text


def test_import_still_takes_dump_files_beside_its_tensorboard_and_mlflow_subcommands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`studio import FILE…` is the dumps import it always was (docs/cli.md#commands); without a
    server it stops at the settings, after parsing its options as that command's."""
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "none.json"))
    for name in ("STUDIO_URL", "STUDIO_TOKEN", "STUDIO_TEAM"):
        monkeypatch.delenv(name, raising=False)
    dump = tmp_path / "3.jsonl"
    dump.write_text("{}\n")
    result = CliRunner().invoke(main, ["import", str(dump), "--experiment", "e"])
    assert result.exit_code == 4 and "no server" in result.output
    listed = CliRunner().invoke(main, ["import", "--help"]).output
    assert all(name in listed for name in ("dumps", "tensorboard", "mlflow"))
