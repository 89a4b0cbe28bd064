"""The rollout layer both backends share: the one rule for the tokens that end a turn."""

from __future__ import annotations

import copy
from typing import Any

from transformers import GenerationConfig

from trainer.rollout import stop_token_ids

IM_END = 2  # SmolLM2's <|im_end|>, also its EOS


def test_a_turn_ends_on_the_tokenizers_eos(smol_tokenizer: Any) -> None:
    assert stop_token_ids(smol_tokenizer) == [IM_END]


def test_the_models_generation_eos_ids_end_a_turn_too(smol_tokenizer: Any) -> None:
    assert stop_token_ids(smol_tokenizer, GenerationConfig(eos_token_id=[IM_END, 9])) == [IM_END, 9]
    assert stop_token_ids(smol_tokenizer, GenerationConfig(eos_token_id=9)) == [IM_END, 9]


def test_the_chat_templates_turn_end_counts_when_it_is_not_the_eos(smol_tokenizer: Any) -> None:
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.eos_token = "<|endoftext|>"
    assert stop_token_ids(tokenizer) == [tokenizer.eos_token_id, IM_END]
