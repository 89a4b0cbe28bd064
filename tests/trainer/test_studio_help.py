"""`studio --help` says how `--set` names a config field (docs/cli.md#field-paths)."""

from __future__ import annotations

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
