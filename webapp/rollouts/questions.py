"""The user's question inside a stored prompt (docs/rollouts.md#per-prompt-learning).

A step's prompt is stored as the model saw it: the chat template rendered with its special tokens
(trainer.flows.base decodes the prompt ids with ``skip_special_tokens=False``), so it starts with
the template's system part. The chat messages themselves are not stored with the step, but each
template marks where a message of a role starts and ends; the last user message is the question.
"""

from __future__ import annotations

import re

# One pattern per chat-template family the trainer's models use: the content of one user message.
# A message ends at its end marker, or at the start of the next turn of any role.
USER_TURNS: tuple[re.Pattern[str], ...] = (
    # ChatML: SmolLM2, Qwen.
    re.compile(r"<\|im_start\|>user\s*\n(.*?)(?:<\|im_end\|>|<\|im_start\|>|\Z)", re.S),
    # Llama 3.
    re.compile(
        r"<\|start_header_id\|>user<\|end_header_id\|>\s*(.*?)(?:<\|eot_id\|>|<\|start_header_id\|>|\Z)",
        re.S,
    ),
    # Gemma.
    re.compile(r"<start_of_turn>user\s*\n(.*?)(?:<end_of_turn>|<start_of_turn>|\Z)", re.S),
    # Zephyr and Phi-3.
    re.compile(r"<\|user\|>\s*(.*?)(?:<\|end\|>|</s>|<\|(?:assistant|system|tool|user)\|>|\Z)", re.S),
    # Llama 2 and Mistral.
    re.compile(r"\[INST\]\s*(.*?)(?:\[/INST\]|\Z)", re.S),
)
SYSTEM_BLOCK = re.compile(r"<<SYS>>.*?<</SYS>>\s*", re.S)  # Llama 2 puts the system part inside [INST]


def user_question(prompt: str) -> str:
    """The last user message of a chat-templated prompt; the prompt itself when no template the
    trainer's models use marks one."""
    for pattern in USER_TURNS:
        found = [match.group(1) for match in pattern.finditer(prompt)]
        question = SYSTEM_BLOCK.sub("", found[-1]).strip() if found else ""
        if question:
            return question
    return prompt.strip()
