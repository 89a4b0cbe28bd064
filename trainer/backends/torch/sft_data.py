"""Demonstrations as training tensors: conversations encoded the way the flows prompt the model, with
a loss mask on the assistant's tokens only, packed back to back without padding (docs/sft.md#the-sft-stage).

A conversation is rendered exactly as :class:`~trainer.flows.base.AgentFlowBase` renders the
episode it imitates: tool results go back as the tool format's one message per turn
(``render_results``), the tool list joins the system message when the chat template does not render
``tools=`` itself, and each assistant turn is the text the model would generate after the template's
generation prompt, up to and including its stop token. So what SFT teaches is what the flow asks for.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from trainer.contract import MESSAGES_KEY, TOOLS_KEY, conversation_problems, tool_schemas_of
from trainer.flows.base import template_renders_tools, with_tools_in_system
from trainer.mdp import Message
from trainer.tools import FORMATS

IGNORED = -100  # the label of a position that is not trained (torch's cross_entropy ignore_index)


@dataclass(frozen=True)
class Conversation:
    messages: list[Message]
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class Example:
    """One encoded conversation: its tokens, and 1 on the tokens the model is trained to write."""

    input_ids: list[int]
    loss_mask: list[int]

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def load_conversations(path: str | Path, *, limit: int | None = None) -> list[Conversation]:
    """The conversations of a demonstrations parquet (the chat-messages layout), checked row by row."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"dataset {file} does not exist")
    table = pq.read_table(file)
    if MESSAGES_KEY not in table.column_names:
        raise ValueError(
            f"dataset {file} has no {MESSAGES_KEY} column: an SFT run reads demonstrations "
            "(see docs/sft.md#demonstrations)"
        )
    conversations = []
    for number, row in enumerate(table.to_pylist()[:limit]):
        messages = row[MESSAGES_KEY]
        problems = conversation_problems(messages)
        if problems:
            raise ValueError(f"dataset {file} row {number}, column {MESSAGES_KEY}: {problems[0]}")
        tools = tool_schemas_of(row.get(TOOLS_KEY))
        conversations.append(Conversation([dict(m) for m in messages], tools))
    if not conversations:
        raise ValueError(f"dataset {file} has no rows")
    return conversations


def flow_messages(conversation: Conversation, tool_format: str, *, renders_tools: bool) -> list[Message]:
    """The messages as the flow shows them to the model: each turn's tool results as one message of
    the tool format, the tool list in the system message unless the template renders it."""
    format_ = FORMATS.get(tool_format)
    shown: list[Message] = []
    results: list[str] = []
    for message in conversation.messages:
        if message["role"] == "tool":
            results.append(message["content"])
            continue
        if results:
            shown.append(format_.render_results(results))
            results = []
        shown.append({"role": message["role"], "content": message["content"]})
    if results:
        shown.append(format_.render_results(results))
    if conversation.tools and not renders_tools:
        shown = with_tools_in_system(shown, format_.tools_prompt(conversation.tools))
    return shown


def encode(
    tokenizer: Any,
    conversation: Conversation,
    *,
    tool_format: str,
    stop_ids: Collection[int],
    max_length: int,
    calls_only: bool = False,
) -> Example:
    """Token ids and the assistant-only loss mask of one conversation, cut to ``max_length``; with
    ``calls_only``, only the assistant turns that call a tool are trained (sft.train_turns).

    Each assistant turn is what the template adds after the generation prompt, so the chat template
    must render a conversation as the prefix of its continuation (SmolLM2's, Qwen2's and Llama's do);
    one that rewrites earlier turns is refused rather than trained on mismatched tokens.
    """
    renders_tools = template_renders_tools(tokenizer)
    chat = flow_messages(conversation, tool_format, renders_tools=renders_tools)
    tools = conversation.tools if renders_tools and conversation.tools else None
    trained_turns = iter(_calls_a_tool(conversation) if calls_only else [])
    ids: list[int] = []
    mask: list[int] = []
    for index, message in enumerate(chat):
        if message["role"] != "assistant":
            continue
        trained = next(trained_turns, True)
        prompt = _render(tokenizer, chat[:index], tools, generation_prompt=True)
        full = _render(tokenizer, chat[: index + 1], tools, generation_prompt=False)
        if full[: len(prompt)] != prompt or prompt[: len(ids)] != ids:
            raise ValueError(
                "the chat template does not render a conversation as the prefix of its continuation, "
                "so assistant turns cannot be told apart: use a model whose template does"
            )
        turn = full[len(prompt) :]
        mask += [0] * (len(prompt) - len(ids)) + (_turn_mask(turn, stop_ids) if trained else [0] * len(turn))
        ids = full
    return Example(ids[:max_length], mask[:max_length])


def _calls_a_tool(conversation: Conversation) -> list[bool]:
    """For each assistant turn in order: whether it called a tool (a tool result follows it). The
    flow's messages keep the assistant turns one for one and in order (flow_messages)."""
    messages = conversation.messages
    return [
        index + 1 < len(messages) and messages[index + 1]["role"] == "tool"
        for index, message in enumerate(messages)
        if message["role"] == "assistant"
    ]


def _render(tokenizer: Any, messages: list[Message], tools: Any, *, generation_prompt: bool) -> list[int]:
    if not messages:
        return []
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
    )
    return [int(token) for token in ids]


def _turn_mask(turn: list[int], stop_ids: Collection[int]) -> list[int]:
    """1 up to and including the turn's first stop token (where generation ends), 0 after it: the
    template's separator after the stop token is the next prompt's, never generated."""
    for position, token in enumerate(turn):
        if token in stop_ids:
            return [1] * (position + 1) + [0] * (len(turn) - position - 1)
    return [1] * len(turn)


# -- packing --------------------------------------------------------------------------------------


@dataclass
class PackedBatch:
    """Examples packed back to back into rows of at most ``capacity`` tokens: position ids restart at
    each example and the attention mask keeps each token inside its own example, so every example is
    computed exactly as if it ran alone."""

    input_ids: torch.Tensor  # [p, C]
    position_ids: torch.Tensor  # [p, C]
    attention_mask: torch.Tensor  # [p, 1, C, C] bool: True where a query token sees a key token
    labels: torch.Tensor  # [p, C] the next token where it is trained, else IGNORED

    @property
    def trained_tokens(self) -> int:
        return int((self.labels != IGNORED).sum())

    def to(self, device: torch.device) -> PackedBatch:
        return PackedBatch(*(tensor.to(device) for tensor in vars(self).values()))


def pack(examples: Sequence[Example], capacity: int) -> list[list[int]]:
    """Example indices per packed row: longest first, each into the first row it fits (first-fit
    decreasing); an example is never split."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(examples)), key=lambda i: -len(examples[i].input_ids)):
        length = len(examples[index].input_ids)
        fits = next((r for r, free in enumerate(room) if free >= length), None)
        if fits is None:
            rows.append([])
            room.append(capacity)
            fits = len(rows) - 1
        rows[fits].append(index)
        room[fits] -= length
    return rows


def packed_batch(
    examples: Sequence[Example], rows: Sequence[Sequence[int]], pad_token_id: int
) -> PackedBatch:
    """The tensors of ``rows`` (from :func:`pack`), each as long as the longest packed row."""
    width = max(sum(len(examples[i].input_ids) for i in row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORED, dtype=torch.long)
    owner = torch.full((len(rows), width), -1, dtype=torch.long)  # which example a position holds
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            ids, mask = examples[i].input_ids, examples[i].loss_mask
            end = at + len(ids)
            input_ids[r, at:end] = torch.tensor(ids)
            position_ids[r, at:end] = torch.arange(len(ids))
            owner[r, at:end] = i
            for t in range(len(ids) - 1):  # position t predicts token t + 1
                if mask[t + 1]:
                    labels[r, at + t] = ids[t + 1]
            at = end
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    same = owner[:, :, None] == owner[:, None, :]
    # Padding sees only itself, so no softmax row is empty; its label is IGNORED anyway.
    diagonal = torch.eye(width, dtype=torch.bool)[None]
    attention = (causal & same) | diagonal
    return PackedBatch(input_ids, position_ids, attention[:, None], labels)
