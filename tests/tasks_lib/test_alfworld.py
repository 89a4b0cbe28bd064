"""ALFWorld: our six-family game set played in ALFWorld's real TextWorld engine through AlfworldEnv."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import validate
from tasks_lib.alfworld.data import FIXTURES, find_games, resolve_game
from tasks_lib.alfworld.engine import TASK_TYPES, AlfredGame, expert_plan
from tests.tasks_lib.helpers import Episode, last_text, malformed_policy, play, read_rows, scripted, tool_call
from trainer.mdp import Observation

Prepared = Callable[..., dict[str, Path]]


def all_rows(splits: dict[str, Path]) -> list[dict[str, Any]]:
    return [row for path in splits.values() for row in read_rows(path)]


def test_the_fixture_games_cover_the_six_task_families() -> None:
    games = find_games(FIXTURES / "json_2.1.1")
    assert len(games) >= 6
    assert {game.task_type for game in games} == set(TASK_TYPES)
    assert {game.split for game in games} == {"train", "valid_seen"}


def test_prepare_writes_valid_rows_that_name_fixture_games_relative_to_the_package(
    prepared: Prepared,
) -> None:
    splits = prepared("alfworld")
    assert set(splits) == {"train", "val"}
    assert all(validate(path) == [] for path in splits.values())
    for row in all_rows(splits):
        assert row["extra_info"]["gamefile"].startswith("fixtures:json_2.1.1/")
        game = json.loads(resolve_game(row["extra_info"]["gamefile"]).read_text(encoding="utf-8"))
        assert game["solvable"] is True and "(define (domain alfred)" in game["pddl_domain"]
        assert row["reward_model"]["ground_truth"] in game["grammar"]
        assert json.loads(row["env_kwargs"]) == {"env_type": "alfworld", "tools": ["env_step"]}


def test_prepared_rows_still_play_after_the_output_folder_is_gone(tmp_path: Path) -> None:
    """The webapp prepares into a temporary folder and keeps only the parquet it uploads."""
    from tasks_lib import PrepareOptions, load_recipes

    written = load_recipes().get("alfworld").prepare(None, tmp_path / "out", PrepareOptions())
    rows = read_rows(written["train"])
    shutil.rmtree(tmp_path / "out")
    row = rows[0]
    plan = expert_plan(resolve_game(row["extra_info"]["gamefile"]))
    assert play(row, scripted([command(step) for step in plan])).total == 1.0


def test_the_engine_opens_a_game_with_its_goal_and_admissible_commands(prepared: Prepared) -> None:
    row = next(
        r for r in all_rows(prepared("alfworld")) if r["extra_info"]["task_type"] == "pick_and_place_simple"
    )
    game = AlfredGame(resolve_game(row["extra_info"]["gamefile"]))
    try:
        text = game.reset()
        assert "Your task is to: put a mug in the cabinet." in text
        assert "go to countertop 1" in game.admissible and not game.won
        assert game.step("go to countertop 1").startswith("You arrive at countertop 1.")
        assert "take mug 1 from countertop 1" in game.admissible
    finally:
        game.close()


def command(text: str) -> str:
    return tool_call("env_step", command=text)


@pytest.mark.slow
def test_the_expert_plan_wins_every_game_with_reward_one_on_the_last_step(prepared: Prepared) -> None:
    for row in all_rows(prepared("alfworld")):
        plan = expert_plan(resolve_game(row["extra_info"]["gamefile"]))
        assert 3 <= len(plan) <= 12
        episode = play(row, scripted([command(step) for step in plan]), max_steps=20)
        assert episode.done and episode.total == 1.0
        assert episode.rewards[-1] == 1.0 and episode.infos[-1]["won"] is True
        assert all(reward == 0.0 for reward in episode.rewards[:-1])


def random_admissible(seed: int) -> Callable[[Observation], str]:
    rng = random.Random(seed)

    def policy(observation: Observation) -> str:
        admissible = last_text(observation).rsplit("Admissible commands: ", 1)[1].split("\n")[0].split(", ")
        return command(rng.choice(admissible))

    return policy


@pytest.mark.slow
def test_a_random_admissible_policy_rarely_wins(prepared: Prepared) -> None:
    rows = all_rows(prepared("alfworld"))
    episodes: list[Episode] = [
        play(row, random_admissible(seed), max_steps=8) for seed, row in enumerate(rows)
    ]
    assert sum(episode.total for episode in episodes) / len(episodes) < 0.5
    assert all(info["invalid_commands"] == 0 for episode in episodes for info in episode.infos)


def test_inadmissible_and_malformed_commands_change_nothing_and_earn_nothing(prepared: Prepared) -> None:
    row = all_rows(prepared("alfworld"))[0]
    episode = play(
        row, scripted([command("fly to the moon"), command("take mug 1 from fridge 1"), "I am done."])
    )
    assert episode.rewards == [0.0, 0.0, 0.0] and episode.done
    assert [info["invalid_commands"] for info in episode.infos[:2]] == [1, 1]
    malformed = play(row, malformed_policy("Done."), max_steps=15)
    assert malformed.total == 0.0 and malformed.done


def test_only_one_command_runs_per_turn(prepared: Prepared) -> None:
    row = next(
        r for r in all_rows(prepared("alfworld")) if r["extra_info"]["task_type"] == "pick_and_place_simple"
    )
    two = command("go to countertop 1") + command("take mug 1 from countertop 1")
    episode = play(row, scripted([two, "stop"]))
    calls = episode.infos[0]["tool_calls"]
    assert [call.error for call in calls] == [None, "too_many_calls"]


def test_prepare_accepts_the_real_json_2_1_1_layout(prepared: Prepared, tmp_path: Path) -> None:
    """ALFWorld's release ships game.tw-pddl beside traj_data.json in train/valid_seen/valid_unseen."""
    built = {
        Path(r["extra_info"]["gamefile"]).name: resolve_game(r["extra_info"]["gamefile"])
        for r in all_rows(prepared("alfworld"))
    }
    root = tmp_path / "json_2.1.1"
    sources = sorted((FIXTURES / "json_2.1.1").glob("*/*/trial_*"))
    for number, (split, trial) in enumerate(
        zip(["train", "valid_seen", "valid_unseen", "train"], sources, strict=False)
    ):
        folder = root / split / trial.parent.name / trial.name
        folder.mkdir(parents=True)
        shutil.copy(trial / "traj_data.json", folder)
        shutil.copy(built[trial.name], folder / "game.tw-pddl")
        if number == 3:  # ALFWorld skips unsolvable games and movable receptacles
            game = json.loads((folder / "game.tw-pddl").read_text(encoding="utf-8"))
            (folder / "game.tw-pddl").write_text(json.dumps({**game, "solvable": False}), encoding="utf-8")
    movable = root / "train" / "pick_and_place_simple-Mug-None-Cabinet-1-movable_recep" / "trial_x"
    shutil.copytree(root / "train" / sources[0].parent.name / sources[0].name, movable)
    splits = prepared("alfworld", fixtures=False, source=root)
    assert {split: len(read_rows(path)) for split, path in splits.items()} == {
        "train": 1,
        "val": 1,
        "test": 1,
    }
    for row in all_rows(splits):
        game_file = Path(row["extra_info"]["gamefile"])
        assert game_file.is_relative_to(root) and game_file.name == "game.tw-pddl"
        assert resolve_game(str(game_file)) == game_file
        assert play(row, scripted([command(c) for c in expert_plan(game_file)])).total == 1.0


def test_the_env_refuses_other_tools() -> None:
    from tasks_lib.alfworld.env import AlfworldEnv

    with pytest.raises(ValueError, match="only the env_step tool"):
        AlfworldEnv(tools=["calculator"])
