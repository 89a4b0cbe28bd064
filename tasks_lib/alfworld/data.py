"""ALFWorld game folders -> rows in the data contract.

Accepted input: ALFWorld's ``json_2.1.1`` layout (``train/``, ``valid_seen/``, ``valid_unseen/``, each
holding ``<task>-<object>-<mrecep>-<recep>-<scene>/trial_*/`` folders with ``traj_data.json`` and
``game.tw-pddl``), or one split folder of it. Games are picked the way AlfredTWEnv.collect_game_files
picks them: one of the six task types, no movable receptacles or sliced objects, ``solvable`` true. A
folder with ``initial_state.pddl`` but no ``game.tw-pddl`` (our fixtures) is played by building its
game file on first use (:func:`resolve_game`). Rows name our fixtures relative to the package and other
games by absolute path. Splits map to train.parquet, val.parquet (valid_seen) and test.parquet
(valid_unseen).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks_lib.alfworld import prompts
from tasks_lib.alfworld.engine import TASK_TYPES, build_game_file
from tasks_lib.common import Row, make_row, portable_path, resolve_path, split_off, write_splits
from tasks_lib.registry import PrepareOptions

logger = logging.getLogger(__name__)

DATA_SOURCE = "alfworld"
FIXTURES = Path(__file__).parent / "fixtures"
SPLITS = {"train": "train", "valid_seen": "val", "valid_train": "val", "valid_unseen": "test"}
ENV_KWARGS = {"env_type": "alfworld", "tools": ["env_step"]}


@dataclass(frozen=True)
class GameFolder:
    folder: Path
    split: str  # ALFWorld's split name (train, valid_seen, valid_unseen)
    task_type: str
    goal: str
    game_file: Path | None  # None: only initial_state.pddl, the game file must be built


def _goal(traj_data: dict[str, Any]) -> str:
    annotations = traj_data.get("turk_annotations", {}).get("anns") or []
    if annotations and annotations[0].get("task_desc"):
        return str(annotations[0]["task_desc"]).strip()
    params = traj_data.get("pddl_params", {})
    return f"{traj_data['task_type']}: {params.get('object_target', '')} -> {params.get('parent_target', '')}"


def read_game_folder(folder: Path, split: str) -> GameFolder | None:
    """The game in ``folder``, or None (with a log line) when ALFWorld would skip it."""
    if "movable" in str(folder) or "Sliced" in str(folder):
        logger.info("skipping %s: movable receptacles and sliced objects are not supported", folder)
        return None
    traj_data = json.loads((folder / "traj_data.json").read_text(encoding="utf-8"))
    if traj_data.get("task_type") not in TASK_TYPES:
        logger.info("skipping %s: task type %r", folder, traj_data.get("task_type"))
        return None
    game_file: Path | None = folder / "game.tw-pddl"
    if game_file is not None and game_file.is_file():
        if not json.loads(game_file.read_text(encoding="utf-8")).get("solvable", False):
            logger.info("skipping %s: not solvable", folder)
            return None
    elif (folder / "initial_state.pddl").is_file():
        game_file = None
    else:
        logger.info("skipping %s: neither game.tw-pddl nor initial_state.pddl", folder)
        return None
    return GameFolder(folder, split, str(traj_data["task_type"]), _goal(traj_data), game_file)


def find_games(root: Path) -> list[GameFolder]:
    """Every playable game under ``root`` (a json_2.1.1 folder or one of its split folders), sorted."""
    split_dirs = [root / name for name in SPLITS if (root / name).is_dir()]
    if not split_dirs:
        split_dirs = [root]
    games = []
    for split_dir in split_dirs:
        split = split_dir.name if split_dir.name in SPLITS else "train"
        for traj in sorted(split_dir.rglob("traj_data.json")):
            game = read_game_folder(traj.parent, split)
            if game is not None:
                games.append(game)
    return games


def resolve_game(value: str) -> Path:
    """The ``game.tw-pddl`` that a row's ``extra_info.gamefile`` names: a game file, a folder holding one,
    or a problem folder (``initial_state.pddl`` + ``traj_data.json``) whose game file is built once into
    a cache keyed by the folder's content."""
    path = resolve_path(value, FIXTURES)
    if path.is_file():
        return path
    if (path / "game.tw-pddl").is_file():
        return path / "game.tw-pddl"
    if (path / "initial_state.pddl").is_file():
        return cached_game_file(path)
    raise FileNotFoundError(
        f"ALFWorld game {value!r} not found (no game.tw-pddl or initial_state.pddl at {path})"
    )


def cached_game_file(folder: Path) -> Path:
    digest = hashlib.sha256()
    for name in ("initial_state.pddl", "traj_data.json"):
        digest.update((folder / name).read_bytes())
    target = Path(tempfile.gettempdir()) / "agent-r1-studio-alfworld" / f"{digest.hexdigest()[:24]}.tw-pddl"
    if not target.is_file():
        # Written aside and renamed, so a concurrent episode never opens a half-written file.
        partial = build_game_file(folder, target.with_suffix(f".{os.getpid()}.partial"))
        os.replace(partial, target)
    return target


def to_row(game: GameFolder, split: str, index: int) -> Row:
    return make_row(
        data_source=DATA_SOURCE,
        messages=prompts.messages(),
        ground_truth=game.goal,
        index=index,
        split=split,
        ability="embodied",
        env_kwargs=ENV_KWARGS,
        extra={
            "gamefile": portable_path(game.game_file or game.folder, FIXTURES),
            "task_type": game.task_type,
            "alfworld_split": game.split,
        },
    )


def prepare(source: Path | None, output: Path, options: PrepareOptions) -> dict[str, Path]:
    """Write train/val/test parquet files for the games under ``source`` (our fixtures when None)."""
    root = source or FIXTURES
    if (root / "json_2.1.1").is_dir():
        root = root / "json_2.1.1"
    games = find_games(root)
    if not games:
        raise ValueError(f"no playable ALFWorld games under {root}")
    by_split: dict[str, list[GameFolder]] = {"train": [], "val": [], "test": []}
    for game in games:
        by_split[SPLITS[game.split]].append(game)
    if not by_split["val"] and options.val_fraction > 0:
        by_split["train"], by_split["val"] = split_off(by_split["train"], options.val_fraction, options.seed)
    rows: dict[str, list[Row]] = {}
    index = 0
    for split, split_games in by_split.items():
        rows[split] = []
        for game in split_games:
            rows[split].append(to_row(game, split, index))
            index += 1
    logger.info("ALFWorld games: %s", {split: len(split_rows) for split, split_rows in rows.items()})
    return write_splits(rows, output, limit=options.limit)
