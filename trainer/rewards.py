"""Reward functions, and the routing of a row's ``data_source`` to one of them.

A reward function is ``fn(solution_str, ground_truth, extra_info) -> float | dict``; a dict must
hold ``"score"`` and may add other numbers (accuracy, F1, ...) that are logged beside it.
Recipes register theirs from their plugin module (see :mod:`trainer.plugins`).

Which function scores a row is decided once, by :func:`route` (docs/datasets.md#routing): the run's
own mapping (``data.rewards``, frozen from its datasets' mappings), then a reward function of that
very name, then :data:`DATA_SOURCES` — the other projects' names (verl's ``default_compute_score``
routing, Agent-R1's recipes) as exact names and prefix rules, some of them marked as sources that
cannot be scored here, with what to do instead.

A team's own rewards (:class:`~trainer.contract.TeamRewardSpec`: rule kinds, or a remote endpoint)
become reward functions in :mod:`trainer.team_rewards`; a run registers them for itself only
(:func:`trainer.team.run_scope`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from trainer.config_sections import RewardRule
from trainer.registry import Registry, RegistryError

logger = logging.getLogger(__name__)

RewardFn = Callable[[str, Any, dict[str, Any]], "float | dict[str, Any]"]

REWARDS: Registry[RewardFn] = Registry("reward function")


class RewardError(RuntimeError):
    """A reward could not be computed for a reason outside the response (a remote endpoint that timed
    out or failed): the step scores 0 and the run counts it as a reward error instead of failing."""


class UnroutedDataSource(RegistryError):
    """No reward function is known for a data_source: the message says what to do."""


# -- routing ----------------------------------------------------------------------------------------

DEFAULT_REWARD_RULE: RewardRule = "verl"  # RunConfig's data.reward_rule default, outside any run too


@dataclass(frozen=True)
class Route:
    """Where the routing table sends a data_source: a reward function's name, or None with the reason
    it cannot be scored here (``why``); ``verl``: the reward that scores it exactly as verl 0.9.1's
    ``default_compute_score`` does, when verl scores it and ``reward`` is our lenient one."""

    reward: str | None
    why: str = ""
    verl: str | None = None


@dataclass(frozen=True)
class Routing:
    """How one data_source is scored: ``reward`` (None: it cannot be) and ``rule``, in words.
    ``reward_rule``: "verl" or "lenient" when the source has both (docs/rewards.md#verl-and-lenient-rules),
    "" when it has one reward; ``other``: the reward of the rule not taken."""

    data_source: str
    reward: str | None
    rule: str
    why: str = ""
    reward_rule: str = ""
    other: str | None = None

    @property
    def message(self) -> str:
        """What a person should read about a data_source that has no reward."""
        if self.reward is not None:
            return f"{self.data_source!r} is scored by {self.reward!r} ({self.rule})"
        cause = self.why or (
            f"no reward function is registered for {self.data_source!r} (registered: {', '.join(REWARDS.names())})"
        )
        return (
            f"{cause}; map it to a reward function (a built-in one or your team's) on the dataset's "
            "page, or register a reward for it"
        )


class RouteTable:
    """The data_source routing table: exact names and prefix rules, one table for the whole process."""

    def __init__(self) -> None:
        self.exact: Registry[Route] = Registry("data_source route")
        self._prefixes: dict[str, Route] = {}
        self._mapping: ContextVar[Mapping[str, str]] = ContextVar(
            "data_source mapping", default=MappingProxyType({})
        )
        self._rule: ContextVar[RewardRule] = ContextVar("reward rule", default=DEFAULT_REWARD_RULE)

    def add(self, data_source: str, reward: str, *, verl: str | None = None) -> None:
        self.exact.add(data_source, Route(reward, verl=verl))

    def add_prefix(self, prefix: str, reward: str, *, verl: str | None = None) -> None:
        self._add_prefix(prefix, Route(reward, verl=verl))

    def add_unscorable(self, data_source: str, why: str, *, prefix: bool = False) -> None:
        """A source we recognise but cannot score here (code sandboxes, images): ``why`` says so."""
        if prefix:
            self._add_prefix(data_source, Route(None, why))
        else:
            self.exact.add(data_source, Route(None, why))

    def _add_prefix(self, prefix: str, route: Route) -> None:
        if prefix in self._prefixes:
            raise RegistryError(f"data_source prefix {prefix!r} is already routed")
        self._prefixes[prefix] = route

    def prefixes(self) -> dict[str, Route]:
        return dict(sorted(self._prefixes.items()))

    @contextlib.contextmanager
    def mapped(self, mapping: Mapping[str, str], rule: RewardRule | None = None) -> Iterator[None]:
        """data_source → reward name, for this block only (a run's ``data.rewards``); it comes first.
        ``rule`` (a run's ``data.reward_rule``) picks verl's or our lenient reward where both exist."""
        token = self._mapping.set(MappingProxyType({**self._mapping.get(), **mapping}))
        rule_token = self._rule.set(rule or self._rule.get())
        try:
            yield
        finally:
            self._rule.reset(rule_token)
            self._mapping.reset(token)

    def route(
        self, data_source: str, mapping: Mapping[str, str] | None = None, rule: RewardRule | None = None
    ) -> Routing:
        """How ``data_source`` is scored; ``mapping`` (a dataset's) comes before everything else, then
        verl's reward when ``rule`` (default: the block's, see :meth:`mapped`) is verl and verl scores it."""
        chosen = {**self._mapping.get(), **dict(mapping or {})}
        if data_source in chosen:
            return Routing(data_source, chosen[data_source], "mapped on the dataset")
        found, how = self._lookup(data_source)
        if found is not None and found.verl is not None:
            verl = (rule or self._rule.get()) == "verl"
            reward, other = (found.verl, found.reward) if verl else (found.reward, found.verl)
            rule_name = "verl" if verl else "lenient"
            return Routing(data_source, reward, how, found.why, reward_rule=rule_name, other=other)
        if data_source in REWARDS:
            return Routing(data_source, data_source, "the reward function of that name")
        if found is not None:
            return Routing(data_source, found.reward, how, found.why)
        return Routing(data_source, None, "unknown")

    def _lookup(self, data_source: str) -> tuple[Route | None, str]:
        """The table's route for ``data_source`` (an exact name, else the longest prefix) and how it matched."""
        if data_source in self.exact:
            return self.exact.get(data_source), "known data_source name"
        for prefix in sorted(self._prefixes, key=len, reverse=True):
            if data_source.startswith(prefix):
                return self._prefixes[prefix], f"names starting {prefix!r}"
        return None, ""


DATA_SOURCES = RouteTable()


def route(
    data_source: str, mapping: Mapping[str, str] | None = None, rule: RewardRule | None = None
) -> Routing:
    return DATA_SOURCES.route(data_source, mapping, rule)


def reward_for(data_source: str) -> RewardFn:
    """The reward function that scores ``data_source``; UnroutedDataSource says what to do otherwise."""
    routing = route(data_source)
    if routing.reward is None:
        raise UnroutedDataSource(routing.message)
    try:
        return REWARDS.get(routing.reward)
    except RegistryError as exc:
        raise UnroutedDataSource(
            f"{data_source!r} is routed to {routing.reward!r}, which is not registered here: {exc}"
        ) from None


def score_step(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None
) -> tuple[float, dict[str, Any]]:
    """Score one final response: (score, the other fields the reward function returned)."""
    reward_fn = reward_for(data_source)
    # A remote reward tells its endpoint which data_source it scores.
    extra = {"data_source": data_source} if getattr(reward_fn, "takes_data_source", False) else {}
    result = reward_fn(solution_str, ground_truth, dict(extra_info or {}), **extra)
    details: dict[str, Any] = {}
    if isinstance(result, Mapping):
        if "score" not in result:
            raise ValueError(
                f"reward function for {data_source!r} returned a dict without 'score': {sorted(result)}"
            )
        details = {key: value for key, value in result.items() if key != "score"}
        result = result["score"]
    if isinstance(result, bool) or not isinstance(result, int | float) or not math.isfinite(result):
        raise ValueError(f"reward function for {data_source!r} returned {result!r}; expected a finite number")
    return float(result), details


# -- text helpers the rule kinds share --------------------------------------------------------------


def _normalise(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


def answers(ground_truth: Any) -> list[Any]:
    """The accepted answers: a list (or array) of them, a ``{"target": [...]}`` struct, or one value."""
    if isinstance(ground_truth, Mapping):
        for key in ("target", "answers", "answer"):
            if key in ground_truth:
                return answers(ground_truth[key])
        return [ground_truth]
    if isinstance(ground_truth, str | bytes) or not hasattr(ground_truth, "__iter__"):
        return [ground_truth]
    return list(ground_truth)


def normalize_answer(text: Any) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, single spaces."""
    lowered = str(text).lower()
    no_punctuation = "".join(char for char in lowered if char not in set(string.punctuation))
    no_articles = re.sub(r"\b(a|an|the)\b", " ", no_punctuation)
    return " ".join(no_articles.split())


def token_f1(prediction: Any, truth: Any) -> float:
    """Token-level F1 of two normalised answers (SQuAD's)."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not predicted or not expected or common == 0:
        return float(predicted == expected)
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(str(text))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


@REWARDS.register("exact")
def exact_match(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """1.0 when the whole response equals the ground truth (or one of a list of them), ignoring case
    and runs of whitespace; else 0.0."""
    return float(_normalise(solution_str) in [_normalise(answer) for answer in answers(ground_truth)])


@REWARDS.register("contains")
def contains(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """1.0 when the response contains the ground truth (or one of a list of them), ignoring case and
    runs of whitespace; else 0.0."""
    response = _normalise(solution_str)
    return float(any(_normalise(answer) in response for answer in answers(ground_truth)))
