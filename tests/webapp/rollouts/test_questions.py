"""The user's question inside a chat-templated prompt (docs/rollouts.md#per-prompt-learning)."""

from __future__ import annotations

import pytest

from webapp.rollouts.questions import user_question

QUESTION = "A shop sells 3 apples for $2. How much do 12 apples cost?"


@pytest.mark.parametrize(
    "prompt",
    [
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n"
        f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
        f"December 2023<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{QUESTION}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        f"<bos><start_of_turn>user\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n",
        f"<|system|>\nBe brief.</s>\n<|user|>\n{QUESTION}</s>\n<|assistant|>\n",
        f"<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n{QUESTION} [/INST]",
    ],
    ids=["chatml", "llama3", "gemma", "zephyr", "llama2"],
)
def test_the_question_is_the_last_user_message_without_the_template(prompt: str) -> None:
    assert user_question(prompt) == QUESTION


def test_a_later_user_turn_is_the_question() -> None:
    prompt = (
        "<|im_start|>user\nfirst try<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert user_question(prompt) == "Are you sure?"


def test_a_prompt_without_a_known_template_is_shown_whole() -> None:
    assert user_question("  Question: 2+2?\nAnswer:") == "Question: 2+2?\nAnswer:"
