"""The data_source routing table: other projects' data_source names → our reward functions.

verl's ``default_compute_score`` (verl 0.9.1, ``verl/utils/reward_score/__init__.py``) and Agent-R1's
recipes name their data sources; files written by their preprocessing scripts carry those names, so
they are routed here to our rewards as exact names and prefix rules (docs/datasets.md#routing).
Sources we cannot score on this machine are routed to no reward, with a reason that says what to
do instead; the user can map them to any reward on the dataset's page.

Each data source verl scores has two rewards: our lenient one (the table's ``reward``) and verl's
rule (``verl_*``, :mod:`tasks_lib.sources.verl_rules`), exactly ``default_compute_score``'s value; a
run's ``data.reward_rule`` picks one (docs/rewards.md#verl-and-lenient-rules).

Importing this module registers the table and the MATH, search-R1 and verl-rule rewards (entry point
``sources`` of the ``agent_r1_studio.tasks`` group), so the trainer routes the same way.
"""

from __future__ import annotations

from tasks_lib.sources.math import compute_score as math_score
from tasks_lib.sources.search_r1 import compute_score as search_r1_score
from tasks_lib.sources.verl_rules import RULES, verl_rule
from trainer.rewards import DATA_SOURCES, REWARDS

MATH = "math"
SEARCH_R1 = "search_r1"

REWARDS.add(MATH, math_score)
REWARDS.add(SEARCH_R1, search_r1_score)
for _name, (_module, _ours) in RULES.items():
    REWARDS.add(_name, verl_rule(_module, _ours))

VERL_MATH, VERL_DAPO = "verl_math", "verl_math_dapo"
SEARCH_R1_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
# verl's rule for the data sources it scores (its default_compute_score's branches).
VERL = {
    "openai/gsm8k": "verl_gsm8k",
    "lighteval/MATH": VERL_MATH,
    "DigitalLearningGmbH/MATH-lighteval": VERL_MATH,
    "HuggingFaceH4/MATH-500": VERL_MATH,
    "math_dapo": VERL_DAPO,
    "math": VERL_DAPO,
    "math_dapo_reasoning": VERL_DAPO,
    **{f"searchR1_{name}": "verl_search_r1" for name in SEARCH_R1_SETS},
}
VERL_PREFIXES = {"aime": VERL_DAPO}

# Exact names: data_source -> the reward registered under the right-hand name.
EXACT = {
    # verl
    "openai/gsm8k": "gsm8k",
    "lighteval/MATH": MATH,
    "DigitalLearningGmbH/MATH-lighteval": MATH,
    "HuggingFaceH4/MATH-500": MATH,
    "math_dapo": MATH,  # verl scores DAPO's "Answer: x" lines; equivalence of the final answer here
    "math": MATH,
    "math_dapo_reasoning": MATH,
    **{f"searchR1_{name}": SEARCH_R1 for name in SEARCH_R1_SETS},
    # Agent-R1's recipes (their HotpotQA data and its cross-evaluation sets)
    "hotpotqa_distractor": "hotpotqa",
    "2wikimultihopqa": "hotpotqa",
    "musique": "hotpotqa",
}
# Prefix rules, the longest first when several match: data_source.startswith(prefix) -> reward.
PREFIXES = {
    "aime": MATH,  # verl: aime2024, aime2025, ... (DAPO math)
    "numina_": MATH,  # verl: PRIME's math sets (verl's rule is not re-implemented: ours only)
    "alfworld_": "alfworld",  # Agent-R1: alfworld_train, alfworld_valid_seen, alfworld_valid_unseen
    "webshop_": "webshop",  # Agent-R1: webshop_{small|full}_{train|test}
}
_SANDBOX = "needs a code-execution sandbox (verl's sandbox fusion / PRIME code reward), which this server does not run"
UNSCORABLE = {
    "codecontests": f"{'codecontests'!r} {_SANDBOX}",
    "apps": f"{'apps'!r} {_SANDBOX}",
    "codeforces": f"{'codeforces'!r} {_SANDBOX}",
    "taco": f"{'taco'!r} {_SANDBOX}",
    "hiyouga/geometry3k": "'hiyouga/geometry3k' is an image task (geo3k): our trainer has no vision models",
}

for _name, _reward in EXACT.items():
    DATA_SOURCES.add(_name, _reward, verl=VERL.get(_name))
for _prefix, _reward in PREFIXES.items():
    DATA_SOURCES.add_prefix(_prefix, _reward, verl=VERL_PREFIXES.get(_prefix))
for _name, _why in UNSCORABLE.items():
    DATA_SOURCES.add_unscorable(_name, _why)
