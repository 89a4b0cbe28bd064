"""The verl reward rule gives exactly verl 0.9.1's ``default_compute_score`` value, and the lenient rule
stays lenient (docs/rewards.md#verl-and-lenient-rules).

Our re-implementations (what scores where verl is not installed) are compared with verl's own
functions, through ``default_compute_score`` itself, on a few hundred responses per family: well-formed,
malformed, boxed, unboxed, with commas, signs, dollars, units, long preambles and repeated tags.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from verl.utils.reward_score import default_compute_score

from tasks_lib.registry import load_recipes
from tasks_lib.sources import VERL, VERL_PREFIXES
from tasks_lib.sources.verl_rules import RULES, as_reward, gsm8k, math_dapo, math_reward, search_r1
from trainer.envs import ToolEnv
from trainer.mdp import Action
from trainer.rewards import DATA_SOURCES, route, score_step

FILLER = "Let me think step by step. " * 14  # past the 300 characters verl reads
SHORT = "Checking once more. " * 8  # past the 100 characters DAPO's box fallback reads, not the 300

GSM8K_TRUTHS = ["72", "-3", "1000", "0.5", "18"]
GSM8K_FORMS = [
    "#### {a}",
    "####{a}",
    "#### ${a}",
    "#### {a}.0",
    "The answer is {a}",
    "{a}",
    "#### {a}.",
    "#### {c}",
    "#### -{a}",
    "#### +{a}",
    "The answer is #### {a}\n",
    "#### {a} dollars",
    "####  {a}",
    "#### {a}\n#### 5",
    "#### 5\n#### {a}",
    "\\boxed{{{a}}}",
    "#### {a}{filler}",
    "{filler}#### {a}",
    "Answer: {a}",
    "#### {a},",
    "#### ,{a}",
    "#### **{a}**",
    "#### {a}/1",
    "",
]
MATH_TRUTHS = [
    "\\frac{1}{2}",
    "0.5",
    "3",
    "\\sqrt{2}",
    "10\\%",
    "x=5",
    "(1,2)",
    "90^\\circ",
    "1,000",
    "1 \\text{ m} \\text{ s}",
]
MATH_FORMS = [
    "\\boxed{{{a}}}",
    "The answer is $\\boxed{{{a}}}$.",
    "\\boxed {a}$",
    "\\fbox{{{a}}}",
    "{a}",
    "\\boxed{{{a}}} or \\boxed{{7}}",
    "\\boxed{{7}} then \\boxed{{{a}}}",
    "\\boxed{{\\dfrac{{1}}{{2}}}}",
    "\\boxed{{1/2}}",
    "\\boxed{{\\frac12}}",
    "\\boxed{{.5}}",
    "\\boxed{{ {a} }}",
    "\\boxed{{\\left( 1,2 \\right)}}",
    "\\boxed{{{a}",
    "\\boxed{{x = {a}}}",
    "\\boxed{{\\sqrt2}}",
    "\\boxed{{10\\%}}",
    "\\boxed{{1{{,}}000}}",
    "\\boxed{{{a} \\text{{ cm}}}}",
    "\\boxed{{\\frac}}",
    "\\boxed{{a \\text{{ b}} \\text{{ c}}}}",
    "{filler}\\boxed{{{a}}}",
    "\\boxed{{{a}}}{filler}",
    "",
]
DAPO_TRUTHS = ["72", "\\frac{1}{2}", "1,000", "-3", "5 dollars", "\\text{(A)}"]
DAPO_FORMS = [
    "Answer: {a}",
    "answer:{a}",
    "ANSWER :  {a}\n",
    "Answer: ${a}$",
    "Answer: x = {a}",
    "Answer: {a}.",
    "Answer: {a} dollars",
    "The answer is {a}",
    "\\boxed{{{a}}}",
    "Answer: \\boxed{{{a}}}",
    "Answer: 7\nAnswer: {a}",
    "Answer: {a}\nAnswer: 7",
    "{filler}Answer: {a}",
    "Answer: {a}{filler}",
    "{filler}\\boxed{{{a}}}",
    "\\boxed{{{a}}}{filler}",
    "\\boxed{{{a}}}{short}",
    "Answer: \\text{{{a}}}",
    "Answer: {c}",
    "Answer: \\frac12",
    "Answer: \\sqrt2",
    "Answer: 1,000",
    "Answer:",
    "",
]
SEARCH_TRUTHS: list[dict[str, Any]] = [
    {"target": ["The Beatles", "Beatles"]},
    {"target": ["Paris"]},
    {"target": "Paris"},
    {"target": ["1,000"]},
]
SEARCH_FORMS = [
    "<answer>{a}</answer>",
    "<answer> the {a}. </answer>",
    "<answer>{a}",
    "{a}",
    "<answer>x</answer><answer>{a}</answer>",
    "<answer>{a}</answer><answer>x</answer>",
    "<think>hm</think>\n<answer>\n{a}\n</answer>",
    "<answer></answer>",
    "<answer>A {a}!</answer>",
    "<answer>{a}</answer>" + "</answer>" * 11,
    "<answer>{a}</answer>" * 11,
    "<answer>{a}</answer>" * 10,
    "<ANSWER>{a}</ANSWER>",
    "",
]


def responses(forms: list[str], truths: list[Any], answers: list[str]) -> Iterator[tuple[str, Any]]:
    """Every form filled with every answer, scored against every ground truth."""
    for form, answer, truth in itertools.product(forms, answers, truths):
        comma = f"{answer[:-3]},{answer[-3:]}" if answer.isdigit() and len(answer) > 3 else answer
        yield form.format(a=answer, c=comma, filler=FILLER, short=SHORT), truth


def search_answer(truth: dict[str, Any]) -> str:
    target = truth["target"]
    return str(target if isinstance(target, str) else target[0])


CASES = {
    "openai/gsm8k": list(responses(GSM8K_FORMS, GSM8K_TRUTHS, [*GSM8K_TRUTHS, "1000", "71"])),
    "lighteval/MATH": list(responses(MATH_FORMS, MATH_TRUTHS, [*MATH_TRUTHS, "4"])),
    "math_dapo": list(responses(DAPO_FORMS, DAPO_TRUTHS, [*DAPO_TRUTHS, "7", "1000"])),
    "searchR1_nq": [
        (form.format(a=answer), truth)
        for form, truth in itertools.product(SEARCH_FORMS, SEARCH_TRUTHS)
        for answer in (search_answer(truth), "Queen", "beatles", "paris", "1000")
    ],
}
OURS = {
    "openai/gsm8k": gsm8k.compute_score,
    "lighteval/MATH": math_reward.compute_score,
    "math_dapo": math_dapo.compute_score,
    "searchR1_nq": search_r1.compute_score,
}


@pytest.fixture(autouse=True, scope="module")
def _recipes() -> None:
    load_recipes()


def test_the_cases_are_a_few_hundred_per_family_and_some_score_each_way() -> None:
    for data_source, cases in CASES.items():
        scores = [as_reward(default_compute_score(data_source, text, truth)) for text, truth in cases]
        values = {score["score"] if isinstance(score, dict) else score for score in scores}
        assert len(cases) >= 200 and len(values) >= 2, (data_source, len(cases), values)


@pytest.mark.parametrize("data_source", sorted(CASES))
def test_our_reimplementation_scores_every_response_as_verl_does(data_source: str) -> None:
    differing = [
        (text, truth, ours, theirs)
        for text, truth in CASES[data_source]
        for ours, theirs in [
            (
                as_reward(OURS[data_source](text, truth)),
                as_reward(default_compute_score(data_source, text, truth)),
            )
        ]
        if ours != theirs
    ]
    assert differing == []


@pytest.mark.parametrize("data_source", sorted(CASES))
def test_the_verl_rule_gives_default_compute_scores_value_through_the_routing(data_source: str) -> None:
    with DATA_SOURCES.mapped({}, "verl"):
        for text, truth in CASES[data_source][::7]:
            score, details = score_step(data_source, text, truth)
            verl = as_reward(default_compute_score(data_source, text, truth))
            assert (score, details) == (
                (verl["score"], {k: v for k, v in verl.items() if k != "score"})
                if isinstance(verl, dict)
                else (verl, {})
            )


def test_every_data_source_verl_scores_here_routes_to_a_verl_rule_of_the_same_module() -> None:
    modules = {"gsm8k": "openai/gsm8k", "math_reward": "lighteval/MATH", "math_dapo": "math_dapo"}
    for data_source, reward in {**VERL, **{f"{p}2024": r for p, r in VERL_PREFIXES.items()}}.items():
        assert route(data_source, rule="verl").reward == reward
        assert route(data_source, rule="lenient").reward not in RULES
        module = RULES[reward][0]
        assert module in modules or module == "search_r1_like_qa_em"


@pytest.mark.parametrize(
    ("response", "verl", "lenient"),
    [
        ("The answer is 72", 0.0, 1.0),
        ("#### 72.0", 0.0, 1.0),
        ("####72", 0.0, 1.0),
        ("#### $72", 0.0, 1.0),
        ("#### 72", 1.0, 1.0),
        ("#### 7,2", 1.0, 1.0),
        ("#### 71", 0.0, 0.0),
    ],
)
def test_switching_to_the_lenient_rule_changes_the_gsm8k_score(
    response: str, verl: float, lenient: float
) -> None:
    with DATA_SOURCES.mapped({}, "verl"):
        assert score_step("openai/gsm8k", response, "72")[0] == verl
    with DATA_SOURCES.mapped({}, "lenient"):
        assert score_step("openai/gsm8k", response, "72")[0] == lenient


def test_our_recipes_and_a_datasets_mapping_are_the_same_under_both_rules() -> None:
    for rule in ("verl", "lenient"):
        assert route("gsm8k", rule=rule).reward == "gsm8k"
        assert route("hotpotqa", rule=rule).reward == "hotpotqa"
        assert route("openai/gsm8k", {"openai/gsm8k": "exact"}, rule).reward == "exact"
        assert route("numina_olympiads", rule=rule).reward == "math"


def test_verls_gsm8k_tool_scores_a_submission_by_the_runs_rule() -> None:
    truth = {"create_kwargs": {"ground_truth": "72"}}
    for rule, expected in (("verl", "reward=0.0"), ("lenient", "reward=1.0")):
        with DATA_SOURCES.mapped({}, rule):
            env = ToolEnv(tools=["calc_gsm8k_reward"])
            env.reset(
                prompt=[{"role": "user", "content": "How many?"}],
                extra_info={"index": 0, "tools_kwargs": {"calc_gsm8k_reward": truth}},
            )
            call = '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "72.0"}}</tool_call>'
            _, _, _, info = asyncio.run(env.step(Action(text=call)))
            assert info["tool_calls"][0].result.endswith(expected)
