"""From trajectories to tensors: step rows, padded response tensors, and model inputs for a few rows.

Rows are steps (docs/algorithms.md#step-batches): all steps of one trajectory are consecutive and in step order. The
model input of a step is its full prompt followed by its response; only the positions that predict
response tokens are sent through the LM head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import torch

from trainer.algos.advantages import StepBatch
from trainer.mdp import Step, Trajectory


@dataclass
class StepRows:
    """The step rows of a batch of trajectories as padded tensors ([S] and [S, T], T = longest response)."""

    trajectories: list[Trajectory]
    steps: list[Step]
    rows_of_traj: list[list[int]]  # step rows of each trajectory, in step order
    traj_index: torch.Tensor  # [S] long
    group_index: torch.Tensor  # [S] long
    anchor_index: torch.Tensor  # [S] long; steps with the same state within a group share an id
    response_ids: torch.Tensor  # [S, T] long, right-padded with 0
    response_mask: torch.Tensor  # [S, T] float, 1 for model tokens
    rewards: torch.Tensor  # [S] float; unscored steps count 0

    @property
    def num_rows(self) -> int:
        return len(self.steps)

    def token_rewards(self) -> torch.Tensor:
        """[S, T]: each step's scalar reward on its last response token."""
        token_rewards = torch.zeros_like(self.response_mask)
        last = torch.tensor([len(step.response_ids) - 1 for step in self.steps])
        token_rewards[torch.arange(self.num_rows), last] = self.rewards
        return token_rewards

    def step_batch(self, token_rewards: torch.Tensor, values: torch.Tensor | None) -> StepBatch:
        return StepBatch(
            token_rewards=token_rewards,
            response_mask=self.response_mask,
            values=values,
            traj_index=self.traj_index,
            group_index=self.group_index,
            anchor_index=self.anchor_index,
        )


def flatten(trajectories: Sequence[Trajectory]) -> StepRows:
    """Stack the steps of ``trajectories`` (each with at least one step of at least one token)."""
    steps: list[Step] = []
    rows_of_traj: list[list[int]] = []
    traj_ids: list[int] = []
    group_ids: list[int] = []
    anchor_ids: list[int] = []
    groups: dict[str, int] = {}
    anchors: dict[tuple[int, int], int] = {}
    for t, trajectory in enumerate(trajectories):
        if not trajectory.steps:
            raise ValueError(
                f"trajectory {trajectory.id} has no steps; drop empty trajectories before training"
            )
        group = groups.setdefault(trajectory.group_id, len(groups))
        rows_of_traj.append(list(range(len(steps), len(steps) + len(trajectory.steps))))
        for step in trajectory.steps:
            if not step.response_ids:
                raise ValueError(f"trajectory {trajectory.id} has a step with an empty response")
            anchor_ids.append(anchors.setdefault((group, step.anchor_id), len(anchors)))
            steps.append(step)
            traj_ids.append(t)
            group_ids.append(group)
    width = max(len(step.response_ids) for step in steps)
    response_ids = torch.zeros((len(steps), width), dtype=torch.long)
    response_mask = torch.zeros((len(steps), width), dtype=torch.float32)
    for row, step in enumerate(steps):
        response_ids[row, : len(step.response_ids)] = torch.tensor(step.response_ids)
        response_mask[row, : len(step.response_mask)] = torch.tensor(step.response_mask, dtype=torch.float32)
    return StepRows(
        trajectories=list(trajectories),
        steps=steps,
        rows_of_traj=rows_of_traj,
        traj_index=torch.tensor(traj_ids, dtype=torch.long),
        group_index=torch.tensor(group_ids, dtype=torch.long),
        anchor_index=torch.tensor(anchor_ids, dtype=torch.long),
        response_ids=response_ids,
        response_mask=response_mask,
        rewards=torch.tensor([float(step.reward or 0.0) for step in steps], dtype=torch.float32),
    )


@dataclass
class _OnDevice:
    """What the micro-batch inputs below share: ``to`` moves every tensor field to a device."""

    def to(self, device: torch.device) -> Self:
        tensors = {
            field.name: value.to(device)
            for field in dataclasses.fields(self)
            if isinstance(value := getattr(self, field.name), torch.Tensor)
        }
        return dataclasses.replace(self, **tensors)


@dataclass
class ModelInputs(_OnDevice):
    """A micro-batch as one right-padded sequence per row, with the positions that predict each row's
    response tokens (so the LM head runs over response positions only)."""

    rows: list[int]
    input_ids: torch.Tensor  # [b, L]
    positions: torch.Tensor  # [b, Tm]; position p's output predicts token p + 1
    width: int  # Tm, the longest response in this micro-batch


@dataclass
class SharedPrefixInputs(_OnDevice):
    """A micro-batch whose rows repeat prompts (the n samples of a group): each distinct prompt runs
    through the model once, and every response continues from its prompt's KV cache."""

    rows: list[int]
    prompt_ids: torch.Tensor  # [u, P] distinct prompts, right-padded
    prompt_mask: torch.Tensor  # [u, P] 1 on prompt tokens
    prompt_lengths: torch.Tensor  # [u]
    row_prompt: torch.Tensor  # [b] which distinct prompt each row continues
    response_ids: torch.Tensor  # [b, Tm] right-padded
    width: int  # Tm


@dataclass
class PackedInputs(_OnDevice):
    """A micro-batch without padding between sequences (docs/performance.md#packed-batches).

    Each distinct prompt is a segment: the prompt once, then each of its rows' responses (less the
    last token, which predicts nothing) back to back. Segments are packed into a few sequences of
    about the longest segment's length; the attention mask lets a token see its own prompt and the
    earlier tokens of its own response only, and position ids restart at each segment, so every
    response is computed exactly as if it ran alone after its prompt.
    """

    rows: list[int]
    input_ids: torch.Tensor  # [p, C] packed sequences, the last ones right-padded
    position_ids: torch.Tensor  # [p, C] each token's position in its own prompt + response
    attention_mask: torch.Tensor  # [p, 1, C, C] bool, True where a query token sees a key token
    pack: torch.Tensor  # [N] the packed sequence of each response-predicting position
    offset: torch.Tensor  # [N] its column there
    row: torch.Tensor  # [N] the micro-batch row (0..b-1) whose response token it predicts
    column: torch.Tensor  # [N] which token of that response
    width: int  # Tm, the longest response in this micro-batch


Inputs = ModelInputs | SharedPrefixInputs | PackedInputs


def model_inputs(
    steps: Sequence[Step],
    rows: Sequence[int],
    pad_token_id: int,
    *,
    share_prefixes: bool = True,
    pack: bool = False,
) -> Inputs:
    """Inputs for ``rows``: packed when asked; else shared-prefix form when some rows repeat a prompt
    (and sharing is on), else one plain sequence per row."""
    if pack:
        return packed_inputs(steps, rows, pad_token_id)
    distinct: dict[tuple[int, ...], int] = {}
    row_prompt = [distinct.setdefault(tuple(steps[row].prompt_ids), len(distinct)) for row in rows]
    if share_prefixes and len(distinct) < len(rows):
        return _shared_prefix_inputs(steps, rows, list(distinct), row_prompt, pad_token_id)
    return _plain_inputs(steps, rows, pad_token_id)


def _plain_inputs(steps: Sequence[Step], rows: Sequence[int], pad_token_id: int) -> ModelInputs:
    # Right padding needs no attention mask: under the causal mask a real token never sees the
    # padding after it, and the padded positions are never read.
    sequences = [steps[row].prompt_ids + steps[row].response_ids for row in rows]
    length = max(len(sequence) for sequence in sequences)
    width = max(len(steps[row].response_ids) for row in rows)
    input_ids = torch.full((len(rows), length), pad_token_id, dtype=torch.long)
    positions = torch.empty((len(rows), width), dtype=torch.long)
    for i, (row, sequence) in enumerate(zip(rows, sequences, strict=True)):
        input_ids[i, : len(sequence)] = torch.tensor(sequence)
        start = len(steps[row].prompt_ids) - 1
        positions[i] = torch.arange(start, start + width).clamp(max=length - 1)
    return ModelInputs(list(rows), input_ids, positions, width)


def _shared_prefix_inputs(
    steps: Sequence[Step],
    rows: Sequence[int],
    prompts: list[tuple[int, ...]],
    row_prompt: list[int],
    pad_token_id: int,
) -> SharedPrefixInputs:
    # Prompts are right-padded too: a padded query position still sees real tokens before it, so no
    # attention row is fully masked (which would put NaNs into the backward pass).
    length = max(len(prompt) for prompt in prompts)
    prompt_ids = torch.full((len(prompts), length), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        prompt_ids[i, : len(prompt)] = torch.tensor(prompt)
        prompt_mask[i, : len(prompt)] = 1
    width = max(len(steps[row].response_ids) for row in rows)
    response_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    for i, row in enumerate(rows):
        response_ids[i, : len(steps[row].response_ids)] = torch.tensor(steps[row].response_ids)
    return SharedPrefixInputs(
        list(rows),
        prompt_ids,
        prompt_mask,
        torch.tensor([len(prompt) for prompt in prompts]),
        torch.tensor(row_prompt),
        response_ids,
        width,
    )


@dataclass
class _Segment:
    """One distinct prompt of a micro-batch and the micro-batch rows that continue it."""

    prompt: list[int]
    members: list[int]  # indices into the micro-batch's rows

    def length(self, steps: Sequence[Step], rows: Sequence[int]) -> int:
        return len(self.prompt) + sum(len(steps[rows[i]].response_ids) - 1 for i in self.members)


def _segments(steps: Sequence[Step], rows: Sequence[int]) -> list[_Segment]:
    by_prompt: dict[tuple[int, ...], _Segment] = {}
    for i, row in enumerate(rows):
        prompt = steps[row].prompt_ids
        by_prompt.setdefault(tuple(prompt), _Segment(list(prompt), [])).members.append(i)
    return list(by_prompt.values())


def _first_fit(lengths: list[int]) -> list[list[int]]:
    """Segment ids per packed sequence: longest first, each into the first sequence it fits, with the
    longest segment's length as the capacity (so packing never makes a sequence longer)."""
    capacity = max(lengths)
    bins: list[list[int]] = []
    room: list[int] = []
    for segment in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        fits = next((b for b, free in enumerate(room) if free >= lengths[segment]), None)
        if fits is None:
            bins.append([])
            room.append(capacity)
            fits = len(bins) - 1
        bins[fits].append(segment)
        room[fits] -= lengths[segment]
    return bins


def packed_inputs(steps: Sequence[Step], rows: Sequence[int], pad_token_id: int) -> PackedInputs:
    """Pack ``rows`` padding-free (see :class:`PackedInputs`)."""
    segments = _segments(steps, rows)
    lengths = [segment.length(steps, rows) for segment in segments]
    bins = _first_fit(lengths)
    capacity = max(lengths)
    input_ids = torch.full((len(bins), capacity), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((len(bins), capacity), dtype=torch.long)
    # Per token: its segment (-1 for padding) and its response (-1 for prompt tokens and padding).
    segment_of = torch.full((len(bins), capacity), -1, dtype=torch.long)
    response_of = torch.full((len(bins), capacity), -1, dtype=torch.long)
    predicts: list[tuple[int, int, int, int]] = []  # (pack, offset, row, column)
    for b, members in enumerate(bins):
        at = 0
        for s in members:
            prompt = segments[s].prompt
            end = at + len(prompt)
            input_ids[b, at:end] = torch.tensor(prompt)
            position_ids[b, at:end] = torch.arange(len(prompt))
            segment_of[b, at:end] = s
            prompt_last = end - 1
            for i in segments[s].members:
                response = steps[rows[i]].response_ids
                start, stop = end, end + len(response) - 1
                input_ids[b, start:stop] = torch.tensor(response[:-1])
                position_ids[b, start:stop] = torch.arange(len(prompt), len(prompt) + len(response) - 1)
                segment_of[b, start:stop] = s
                response_of[b, start:stop] = i
                predicts.append((b, prompt_last, i, 0))
                predicts.extend((b, start + t - 1, i, t) for t in range(1, len(response)))
                end = stop
            at = end
    causal = torch.ones(capacity, capacity, dtype=torch.bool).tril()
    same_segment = segment_of[:, :, None] == segment_of[:, None, :]
    # A key is visible when it is a prompt (or padding) token or a token of the query's own response.
    visible = (response_of[:, None, :] == -1) | (response_of[:, :, None] == response_of[:, None, :])
    mask = (causal & same_segment & visible)[:, None]
    pack, offset, row, column = torch.tensor(predicts, dtype=torch.long).unbind(-1)
    width = max(len(steps[r].response_ids) for r in rows)
    return PackedInputs(list(rows), input_ids, position_ids, mask, pack, offset, row, column, width)


def micro_batches(steps: Sequence[Step], rows: Sequence[int], size: int) -> list[list[int]]:
    """Split ``rows`` into chunks of ``size``, ordered so that equal prompts sit together (their prefix
    is shared) and each chunk holds prompts of similar length (little padding)."""
    ordered = sorted(
        rows,
        key=lambda row: (len(steps[row].prompt_ids), steps[row].prompt_ids, len(steps[row].response_ids)),
    )
    return [ordered[start : start + size] for start in range(0, len(ordered), size)]
