"""verl's spellings of our metric keys (docs/contract.md#the-verl-alias-table).

verl logs some of the same quantities as we do under its own names. The verl backend declares this
table (:meth:`VerlBackend.canonical_key`), and ingestion asks every registered backend
(:func:`trainer.backend_protocol.canonical_key`): a point arriving under one of these keys is stored
under ours as well, so nothing downstream of ingestion knows verl's spellings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from trainer.contract import (
    ACTOR_CLIPFRAC,
    ACTOR_CLIPFRAC_LOWER,
    ACTOR_KL,
    CRITIC_VALUE_LOSS,
    REWARD_MAX,
    REWARD_MEAN,
    REWARD_MIN,
    SFT_LOSS,
    TIMING_ADV_S,
    TIMING_CHECKPOINT_S,
    TIMING_ENV_S,
    TIMING_GENERATE_S,
    TIMING_OLD_LOG_PROB_S,
    TIMING_REF_S,
    TIMING_REWARD_S,
    TIMING_ROLLOUT_S,
    TIMING_STEP_S,
    TIMING_SYNC_WEIGHTS_S,
    TIMING_UPDATE_ACTOR_S,
    TIMING_UPDATE_CRITIC_S,
    TIMING_VAL_S,
    TIMING_VALUES_S,
    val_key,
)

# verl's key → ours, for keys that name the same quantity (verl 0.9.1: trainer/ppo/metric_utils.py,
# trainer/ppo/core_algos.py, workers/utils/losses.py). Keys verl and we spell alike (actor/pg_loss,
# actor/entropy, actor/grad_norm, actor/lr, actor/ppo_kl, response_length/mean, critic/advantages/*)
# need no entry.
VERL_KEY_ALIASES: Mapping[str, str] = {
    "critic/score/mean": REWARD_MEAN,  # verl's score is the reward function's R(τ), ours too
    "critic/score/max": REWARD_MAX,
    "critic/score/min": REWARD_MIN,
    "actor/pg_clipfrac": ACTOR_CLIPFRAC,
    "actor/pg_clipfrac_lower": ACTOR_CLIPFRAC_LOWER,
    "actor/kl_loss": ACTOR_KL,
    "critic/vf_loss": CRITIC_VALUE_LOSS,
    "timing_s/gen": TIMING_ROLLOUT_S,
    "timing_s/step": TIMING_STEP_S,
    "timing_s/testing": TIMING_VAL_S,
    # verl's phases: the marked_timer names of trainer/ppo/v1/trainer_base.py and ray_trainer.py (its
    # reference pass is str(Role.RefPolicy), "ref"); the agent loop's per-trajectory means of
    # experimental/agent_loop/agent_loop.py reach timing_s/ only through ray_trainer.py
    # (docs/health.md#time-breakdown).
    "timing_s/agent_loop/generate_sequences/mean": TIMING_GENERATE_S,
    "timing_s/agent_loop/tool_calls/mean": TIMING_ENV_S,
    "timing_s/reward": TIMING_REWARD_S,
    "timing_s/old_log_prob": TIMING_OLD_LOG_PROB_S,
    "timing_s/ref": TIMING_REF_S,
    "timing_s/values": TIMING_VALUES_S,
    "timing_s/adv": TIMING_ADV_S,
    "timing_s/update_critic": TIMING_UPDATE_CRITIC_S,
    "timing_s/update_actor": TIMING_UPDATE_ACTOR_S,
    "timing_s/update_weights": TIMING_SYNC_WEIGHTS_S,
    "timing_s/save_checkpoint": TIMING_CHECKPOINT_S,
    # verl's SFT trainer (trainer/sft_trainer.py): its val/loss is spelled as ours.
    "train/loss": SFT_LOSS,
}
# verl's validation key: val-core/<data_source>/<var>/mean@N, where var is acc when the reward
# function gives one, else reward (our rule for val/<task>/acc too) and N the samples per prompt;
# verl's MLflow logger writes "@" as "_at_". Only the largest N is in val-core.
VERL_VAL_KEY = re.compile(r"^val-core/(?P<task>[^/]+)/(?:acc|reward)/mean(?:@|_at_)\d+$")


def canonical_key(key: str) -> str | None:
    """Our name for a key verl logs, or None when verl spells it as we do (or it is not verl's)."""
    if key in VERL_KEY_ALIASES:
        return VERL_KEY_ALIASES[key]
    match = VERL_VAL_KEY.match(key)
    if match:
        return val_key(match["task"])
    return None
