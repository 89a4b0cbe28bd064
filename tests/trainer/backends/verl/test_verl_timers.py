"""The verl timer names trainer.contract aliases are the ones verl 0.9.1 records (docs/health.md#time-breakdown)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from trainer.backends.verl.metric_keys import VERL_KEY_ALIASES
from trainer.contract import TIME_BREAKDOWN_KEYS

TIMING = "timing_s/"
AGENT_LOOP = "agent_loop/"


def _source(module: str) -> str:
    # Read, not imported: importing verl's trainer takes seconds (and only the top package is located).
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py").read_text()


def test_every_aliased_phase_is_a_timer_verl_records() -> None:
    trainers = _source("verl.trainer.ppo.v1.trainer_base") + _source("verl.trainer.ppo.ray_trainer")
    agent_loop = _source("verl.experimental.agent_loop.agent_loop")
    phases = {key: ours for key, ours in VERL_KEY_ALIASES.items() if ours in TIME_BREAKDOWN_KEYS}
    assert len(phases) == len(TIME_BREAKDOWN_KEYS)  # every part has verl's name
    for key in phases:
        name = key.removeprefix(TIMING)
        if name.startswith(AGENT_LOOP):
            assert f'timing["{name}"]' in agent_loop, key
        else:
            assert f'marked_timer("{name}"' in trainers, key
