"""The ALFWorld engine: TextWorld's PDDL environment wrapped the way ALFWorld's own AlfredTWEnv wraps it.

AlfredTWEnv.init_env registers a batch of game files with ``textworld.gym`` behind ALFWorld's
``AlfredDemangler`` and ``AlfredInfos`` wrappers; an agent rollout plays one game at a time, so this
module starts that same wrapper stack on one game with ``textworld.start``. ``alfworld`` and
``textworld[pddl]`` are the optional ``alfworld`` install group (GPL dependencies, docs/recipes.md#alfworlds-optional-install-group-gpl);
they are imported only when a game is opened, so the rest of the recipe works without them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

INSTALL_HINT = (
    "the ALFWorld engine is not installed: install the optional group with "
    "`pip install --no-build-isolation -e '.[alfworld]'` (GPL dependencies, see docs/recipes.md)"
)

# ALFWorld's six task families (alfworld.agents.environment.alfred_tw_env.TASK_TYPES).
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)


class EngineMissingError(ImportError):
    """alfworld / textworld[pddl] are not installed."""


def _modules() -> tuple[Any, Any, Any]:
    try:
        import textworld
        from alfworld.agents.environment import alfred_tw_env
        from alfworld.agents.utils import misc
    except ImportError as exc:
        raise EngineMissingError(f"{INSTALL_HINT} ({exc})") from exc
    return textworld, alfred_tw_env, misc


def build_game_file(problem_dir: Path, destination: Path) -> Path:
    """Write ``game.tw-pddl`` for an ALFRED problem folder (``initial_state.pddl`` + ``traj_data.json``),
    as ALFWorld's ``alfworld-generate`` does: the packaged domain and grammar, the task description
    spliced into the grammar, the problem, and ``solvable``. The description is the folder's first human
    annotation, so the file is the same on every run."""
    _, _, misc = _modules()
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    traj_data = json.loads((problem_dir / "traj_data.json").read_text(encoding="utf-8"))
    grammar = misc.add_task_to_grammar(
        Path(ALFRED_TWL2_PATH).read_text(encoding="utf-8"),
        traj_data,
        goal_desc_human_anns_prob=1.0 if traj_data.get("turk_annotations", {}).get("anns") else 0.0,
        rng=random.Random(0),
    )
    game = {
        "pddl_domain": Path(ALFRED_PDDL_PATH).read_text(encoding="utf-8"),
        "grammar": grammar,
        "pddl_problem": (problem_dir / "initial_state.pddl").read_text(encoding="utf-8"),
        "solvable": True,
    }
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(json.dumps(game), encoding="utf-8")
    return destination


class AlfredGame:
    """One ALFWorld game: reset, step with a command, and whether it is won."""

    def __init__(self, gamefile: str | Path, *, with_plan: bool = False) -> None:
        textworld, alfred_tw_env, _ = _modules()
        path = Path(gamefile)
        if not path.is_file():
            raise FileNotFoundError(f"ALFWorld game file {path} does not exist")
        infos = textworld.EnvInfos(
            won=True, admissible_commands=True, extras=["gamefile"], policy_commands=with_plan
        )
        wrappers = [alfred_tw_env.AlfredDemangler(shuffle=False), alfred_tw_env.AlfredInfos]
        self.env = textworld.start(str(path), request_infos=infos, wrappers=wrappers)
        self.gamefile = path
        self.admissible: list[str] = []
        self.won = False
        self.plan: list[str] = []

    def reset(self) -> str:
        state = self.env.reset()
        self._update(state)
        return str(state.feedback)

    def step(self, command: str) -> str:
        state, _, _ = self.env.step(command)
        self._update(state)
        return str(state.feedback)

    def _update(self, state: Any) -> None:
        self.admissible = list(state["admissible_commands"])
        self.won = bool(state["won"])
        if state.get("policy_commands") is not None:
            self.plan = list(state["policy_commands"])

    def close(self) -> None:
        self.env.close()


def expert_plan(gamefile: str | Path) -> list[str]:
    """The commands that solve a game, from the engine's own planner (ALFWorld's PLANNER expert)."""
    game = AlfredGame(gamefile, with_plan=True)
    try:
        game.reset()
        return list(game.plan)
    finally:
        game.close()
