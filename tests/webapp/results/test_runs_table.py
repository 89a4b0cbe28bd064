"""The runs table's queries on the server: sort, filter and group on attributes, config values,
MLflow params and metrics; pages; saved columns; the toolbar's actions and who may use them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client
from django.utils import timezone

from trainer.contract import REWARD_MEAN
from webapp.experiments.models import Experiment, LoggedValue, Run, RunKind, RunStatus
from webapp.ingestion import metrics_store
from webapp.results import runs_table as rt
from webapp.results.runs_columns import columns, default_column_ids
from webapp.results.runs_filters import MAX_PAGE, parse_query

pytestmark = pytest.mark.usefixtures("quick_passwords")


@pytest.fixture
def alice(client: Client, personas: Any) -> Client:
    client.force_login(personas["alice"])
    return client


def _run(experiment: Experiment, seed: int, config: dict[str, Any], rewards: list[float] | None = None,
         **fields: Any) -> Run:  # fmt: skip
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=seed, name=f"{experiment.name} s{seed}",
                             config={"preset": experiment.preset, **config}, **fields)  # fmt: skip
    if rewards:
        points = [
            {"key": REWARD_MEAN, "step": step, "value": v, "ts": 1.7e9 + step}
            for step, v in enumerate(rewards)
        ]
        metrics_store.write_points(run.pk, f"m{run.pk}", points)
    return run


@pytest.fixture
def runs(personas: Any) -> dict[str, Run]:
    acme = personas["acme"]
    grpo = Experiment.objects.create(team=acme, name="grpo", task="gsm8k", preset="grpo")
    ppo = Experiment.objects.create(team=acme, name="ppo", task="gsm8k", preset="ppo")
    now = timezone.now()
    made = {
        "g1": _run(grpo, 1, {"algorithm": {"kl_coef": 0.001, "estimator": "grpo"}}, [0.1, 0.9, 0.5],
                   started_at=now - timedelta(hours=2), finished_at=now - timedelta(hours=1), status=RunStatus.SUCCEEDED),
        "g2": _run(grpo, 2, {"algorithm": {"kl_coef": 0.01, "estimator": "grpo"}}, [0.2, 0.3],
                   started_at=now - timedelta(minutes=10), finished_at=now - timedelta(minutes=5), status=RunStatus.FAILED),
        "p1": _run(ppo, 1, {"algorithm": {"kl_coef": 0.1, "estimator": "gae"}}, [0.7, 0.8],
                   status=RunStatus.SUCCEEDED, labels=["baseline"]),
        "p2": _run(ppo, 2, {"algorithm": {"kl_coef": "auto", "estimator": "gae"}}),  # a string, no metrics
    }  # fmt: skip
    LoggedValue.log_params(made["p1"], {"lr": "3e-6"})
    # Someone else's run: never in Acme's table, never changed by Acme's actions.
    other = Experiment.objects.create(team=personas["other"], name="theirs", task="gsm8k", preset="grpo")
    made["theirs"] = _run(other, 1, {}, [5.0])
    return made


def _table(query: str, ids: list[str] | None = None, team: Any = None) -> rt.RunsTable:
    shown, problems = columns(ids or ["name", "preset", "config:algorithm.kl_coef", f"last:{REWARD_MEAN}",
                                         f"max:{REWARD_MEAN}", "param:lr", "duration"])  # fmt: skip
    assert problems == []
    scope = Run.objects.filter(team=team) if team is not None else Run.objects.filter(team__slug="acme")
    return rt.build(scope, shown, parse_query(QueryDict(query)))


def _names(table: rt.RunsTable) -> list[str]:
    return [row.run.name for row in table.rows]


def test_it_sorts_on_config_values_and_metrics_with_empty_cells_last(runs: dict[str, Run]) -> None:
    assert _names(_table(f"sort=-last:{REWARD_MEAN}")) == ["ppo s1", "grpo s1", "grpo s2", "ppo s2"]
    assert _names(_table(f"sort=max:{REWARD_MEAN}")) == ["grpo s2", "ppo s1", "grpo s1", "ppo s2"]
    # jsonb orders numbers numerically and every string before every number.
    assert _names(_table("sort=config:algorithm.kl_coef")) == ["ppo s2", "grpo s1", "grpo s2", "ppo s1"]
    assert _names(_table("sort=-duration"))[:2] == ["grpo s1", "grpo s2"]
    row = next(r for r in _table("").rows if r.run.name == "grpo s1")
    assert [c.text for c in row.cells] == ["grpo s1", "grpo", "0.001", "0.5", "0.9", "—", "1h 00m"]


FILTERS = [
    ("fc=preset&fo=eq&fv=ppo", {"ppo s1", "ppo s2"}),
    ("fc=status&fo=ne&fv=succeeded", {"grpo s2", "ppo s2"}),
    ("fc=config:algorithm.kl_coef&fo=ge&fv=0.01", {"grpo s2", "ppo s1"}),  # "auto" is not a number
    ("fc=config:algorithm.kl_coef&fo=eq&fv=auto", {"ppo s2"}),
    ("fc=config:algorithm.estimator&fo=contains&fv=GA", {"ppo s1", "ppo s2"}),
    (f"fc=last:{REWARD_MEAN}&fo=gt&fv=0.4", {"grpo s1", "ppo s1"}),
    (f"fc=max:{REWARD_MEAN}&fo=lt&fv=0.85", {"grpo s2", "ppo s1"}),
    ("fc=param:lr&fo=eq&fv=3e-6", {"ppo s1"}),
    ("fc=tags&fo=contains&fv=baseline", {"ppo s1"}),
    ("fc=duration&fo=gt&fv=30m", {"grpo s1"}),
    ("fc=seed&fo=eq&fv=2&fc=preset&fo=eq&fv=grpo", {"grpo s2"}),
]


def test_it_filters_on_every_kind_of_column(runs: dict[str, Run]) -> None:
    for query, expected in FILTERS:
        table = _table(query)
        assert table.query.errors == [], query
        assert set(_names(table)) == expected, query
        assert table.total == len(expected), query


def test_a_filter_that_does_not_parse_is_reported_and_the_rest_still_applies(runs: dict[str, Run]) -> None:
    table = _table("fc=seed&fo=gt&fv=many&fc=preset&fo=eq&fv=ppo&fc=status&fo=gt&fv=running&sort=bogus")
    assert set(_names(table)) == {"ppo s1", "ppo s2"}
    assert len(table.query.errors) == 3
    assert "unknown column 'bogus'" in table.query.errors[0]
    assert "Seed compares numbers; 'many' is not one" in table.query.errors[1]
    assert "Status takes =, ≠" in table.query.errors[2]
    assert table.query.filters[0].error  # kept, so the form shows what was typed


@pytest.mark.parametrize(
    "query, named",
    [
        ("fc=config:algorithm.kl_coef&fo=eq&fv=NaN", "NaN is not a value a config holds"),
        ("fc=config:algorithm.kl_coef&fo=gt&fv=Infinity", "Infinity is not a value a config holds"),
        ("fc=config:algorithm.kl_coef&fo=le&fv=-Infinity", "-Infinity is not a value a config holds"),
        ("fc=config:algorithm.kl_coef&fo=eq&fv=1e309", "1e309 is not a value a config holds"),
        ("fc=name&fo=contains&fv=a%00b", "fv: a query parameter must not contain NUL characters"),
        ("fc=param:lr&fo=eq&fv=%00", "fv: a query parameter must not contain NUL characters"),
        ("sort=last:re%00ward", "sort: a query parameter must not contain NUL characters"),
        ("fc=duration&fo=gt&fv=99999999999999999999", "Duration is at most 1000 years"),
        (f"page={2**63}", f"page: at most {MAX_PAGE}"),
        (f"page={MAX_PAGE + 1}", f"page: at most {MAX_PAGE}"),
    ],
)
def test_a_query_the_table_cannot_use_is_a_400_that_names_what_to_change(
    alice: Client, runs: dict[str, Run], query: str, named: str
) -> None:
    """The findings: each of these was a 500."""
    response = alice.get(f"/t/acme/runs/?{query}")
    assert response.status_code == 400
    assert named in response.content.decode()
    # The table's own form (htmx-boosted) gets the page with its errors as a 200: htmx swaps no 4xx.
    # (A NUL no form field sends is refused before any view: NoNulInQueryMiddleware.)
    boosted = alice.get(f"/t/acme/runs/?{query}", headers={"HX-Request": "true", "HX-Boosted": "true"})
    assert boosted.status_code == (400 if "%00" in query else 200) and named in boosted.content.decode()


def test_sorting_and_grouping_by_a_metric_no_run_has_logged_yet_leaves_its_cells_empty(
    alice: Client, personas: Any
) -> None:
    """The finding: last:reward/mean is a default column, so a new team's first click on it was a 500."""
    fresh = Experiment.objects.create(team=personas["acme"], name="new", task="gsm8k", preset="grpo")
    _run(fresh, 1, {})
    for query in (
        "sort=-last:reward/mean",
        "sort=max:never/logged",
        "group=preset",
        "group=config:algorithm",
    ):
        response = alice.get(f"/t/acme/runs/?{query}")
        assert response.status_code == 200, query
        assert 'id="query-errors"' not in response.content.decode(), query


def test_grouping_by_a_column_gives_counts_and_the_means_of_numeric_columns(runs: dict[str, Run]) -> None:
    table = _table("group=preset")
    groups = {g.text: g for g in table.groups}
    assert {k: g.count for k, g in groups.items()} == {"grpo": 2, "ppo": 2}
    labels = [c.label for c in table.columns]
    assert labels == [f"{REWARD_MEAN} (latest)", f"{REWARD_MEAN} (max)", "Duration"]
    grpo_latest = groups["grpo"].cells[0]
    assert grpo_latest.value == pytest.approx(0.4) and grpo_latest.detail == "0.3 to 0.5"
    assert groups["ppo"].cells[0].value == pytest.approx(0.8)  # the run without metrics counts no value
    assert groups["grpo"].filter_url == "?fc=preset&fo=eq&fv=grpo"
    by_estimator = {g.text: g.count for g in _table("group=config:algorithm.estimator").groups}
    assert by_estimator == {"grpo": 2, "gae": 2}


def test_the_kind_column_tells_training_runs_from_evaluations_and_external_runs(runs: dict[str, Run]) -> None:
    grpo = runs["g1"].experiment
    Run.objects.create(experiment=grpo, team=grpo.team, seed=1, name="eval · grpo s1 · step 2",
                       kind=RunKind.EVALUATION, evaluated_run=runs["g1"], evaluated_step=2)  # fmt: skip
    Run.create_external(grpo, "logged", None)
    kinds = {row.run.name: row.cells[1].text for row in _table("", ids=["name", "kind"]).rows}
    assert kinds == {"eval · grpo s1 · step 2": "evaluation", "logged": "external", "grpo s1": "training",
                     "grpo s2": "training", "ppo s1": "training", "ppo s2": "training"}  # fmt: skip
    assert _names(_table("fc=kind&fo=eq&fv=evaluation")) == ["eval · grpo s1 · step 2"]
    assert set(_names(_table("fc=kind&fo=ne&fv=training"))) == {"eval · grpo s1 · step 2", "logged"}
    assert _table("fc=kind&fo=eq&fv=training").total == 4
    assert {g.text: g.count for g in _table("group=kind").groups} == {
        "evaluation": 1,
        "external": 1,
        "training": 4,
    }
    refused = _table("fc=kind&fo=eq&fv=eval")
    assert refused.query.errors == ["filter kind = eval: kind is one of training, sft, evaluation, external"]


def test_the_table_pages_by_fifty_and_hides_archived_runs(personas: Any) -> None:
    experiment = Experiment.objects.create(team=personas["acme"], name="many", task="gsm8k", preset="grpo")
    Run.objects.bulk_create(
        [Run(experiment=experiment, team=experiment.team, seed=i, name=f"r{i:03}", mlflow_run_id=f"{i:032x}")
         for i in range(120)]
    )  # fmt: skip
    Run.objects.filter(name__in=["r119", "r000"]).archive()
    first = _table("sort=name", ids=["name"])
    assert first.total == 118 and len(first.rows) == rt.PAGE_SIZE and first.rows[0].run.name == "r001"
    last = _table("sort=name&page=3", ids=["name"])
    assert [row.run.name for row in last.rows][-1] == "r118" and len(last.rows) == 18
    assert _names(_table("archived=only", ids=["name"])) == ["r119", "r000"]
    assert _table("archived=include", ids=["name"]).total == 120


def test_columns_name_what_they_show_and_unknown_ones_are_refused() -> None:
    found, problems = columns(["status", "config:rollout.n", "max:val/gsm8k/acc", "param:lr", "oops",
                                  "config:bad path", "median:x"])  # fmt: skip
    assert [c.label for c in found] == ["Status", "rollout.n", "val/gsm8k/acc (max)", "param lr"]
    assert len(problems) == 3 and "unknown column 'oops'" in problems[0]


def test_each_user_keeps_their_columns_per_experiment(
    alice: Client, personas: Any, runs: dict[str, Run]
) -> None:
    experiment = runs["g1"].experiment
    alice.post("/t/acme/runs/columns/", {"col": ["name", "status"], "add_kind": "config", "add_key": "rollout.n",
                                         "experiment": experiment.pk, "next": f"/t/acme/experiments/{experiment.pk}/"})  # fmt: skip
    page = alice.get(f"/t/acme/experiments/{experiment.pk}/")
    assert [c.id for c in page.context["table"].columns] == ["name", "status", "config:rollout.n"]
    # the team's table and another user's view of the experiment keep the defaults
    assert page.context["table"].rows and len(alice.get("/t/acme/runs/").context["table"].columns) > 3
    bob = Client()
    bob.force_login(personas["bob"])
    assert len(bob.get(f"/t/acme/experiments/{experiment.pk}/").context["table"].columns) > 3
    response = alice.post(
        "/t/acme/runs/columns/", {"col": ["name"], "add_kind": "config", "add_key": "not a path"}
    )
    assert response.status_code == 302
    assert [c.id for c in alice.get("/t/acme/runs/").context["table"].columns] == ["name"]


def test_the_url_names_the_columns_and_every_link_of_the_table_keeps_them(
    alice: Client, personas: Any, runs: dict[str, Run]
) -> None:
    shown = ["name", "config:algorithm.kl_coef", f"max:{REWARD_MEAN}"]
    query = "sort=name&fc=preset&fo=eq&fv=grpo&" + "&".join(f"col={c}" for c in shown)
    page = alice.get(f"/t/acme/runs/?{query}").context["runs"]
    assert [c.id for c in page.chosen] == shown and [r.run.name for r in page.table.rows] == [
        "grpo s1",
        "grpo s2",
    ]
    expected = QueryDict(query)
    for link in [h.sort_url for h in page.table.header] + [page.view_url]:
        assert QueryDict(link.removeprefix("?")).getlist("col") == expected.getlist("col"), link
    assert QueryDict(page.view_url.removeprefix("?")).getlist("fv") == ["grpo"]
    # Another member opening the link sees those columns, whatever he saved for himself.
    bob = Client()
    bob.force_login(personas["bob"])
    bob.post("/t/acme/runs/columns/", {"col": ["name"]})
    assert [c.id for c in bob.get(f"/t/acme/runs/?{query}").context["runs"].chosen] == shown
    assert [c.id for c in bob.get("/t/acme/runs/").context["runs"].chosen] == ["name"]


def test_saving_columns_shows_them_at_once_in_place_of_the_urls(alice: Client, runs: dict[str, Run]) -> None:
    back = "/t/acme/runs/?fc=preset&fo=eq&fv=grpo&col=name&col=seed"
    response = alice.post("/t/acme/runs/columns/", {"col": ["status", "name"], "next": back})
    assert response["Location"] == "/t/acme/runs/?fc=preset&fo=eq&fv=grpo&col=status&col=name"


def test_the_default_columns_are_few_enough_to_fit_a_small_window() -> None:
    # What fits 1,024 px is checked in a browser (test_runs_layout_browser.py); the lists stay short.
    assert default_column_ids(None) == [
        "name", "status", "health", "task", "preset", "started", "duration", "steps", f"last:{REWARD_MEAN}",
    ]  # fmt: skip
    assert len(default_column_ids("gsm8k")) == 9 and default_column_ids("gsm8k")[-1] == "last:val/gsm8k/acc"


def test_members_archive_tag_and_delete_runs_of_their_own_team_only(
    alice: Client, personas: Any, runs: dict[str, Run]
) -> None:
    ids = [runs["g1"].pk, runs["g2"].pk, runs["theirs"].pk]
    alice.post("/t/acme/runs/actions/", {"action": "tag", "tag": "sweep-1", "run": ids})
    alice.post("/t/acme/runs/actions/", {"action": "tag", "tag": "sweep-1", "run": ids})  # twice: once
    assert Run.objects.get(pk=runs["g1"].pk).labels == ["sweep-1"]
    assert Run.objects.get(pk=runs["theirs"].pk).labels == []
    alice.post("/t/acme/runs/actions/", {"action": "archive", "run": ids})
    assert Run.objects.filter(archived_at__isnull=False).count() == 2
    alice.post("/t/acme/runs/actions/", {"action": "untag", "tag": "sweep-1", "run": [runs["g1"].pk]})
    assert Run.objects.get(pk=runs["g1"].pk).labels == []
    overlay = alice.post("/t/acme/runs/actions/", {"action": "overlay", "run": ids[:2]})
    assert overlay["Location"] == f"/t/acme/curves/?run={ids[0]}&run={ids[1]}"

    running = _run(runs["g1"].experiment, 9, {}, status=RunStatus.RUNNING)
    confirm = alice.get(f"/t/acme/runs/delete/?run={runs['g2'].pk}&run={running.pk}")
    assert confirm.status_code == 200 and "cancel it first" in confirm.content.decode()
    alice.post("/t/acme/runs/delete/", {"run": [runs["g2"].pk, running.pk, runs["theirs"].pk]})
    assert not Run.objects.filter(pk=runs["g2"].pk).exists()
    assert Run.objects.filter(pk__in=[running.pk, runs["theirs"].pk]).count() == 2


def test_viewers_may_overlay_and_compare_but_not_change_runs(personas: Any, runs: dict[str, Run]) -> None:
    personas["acme"].add_member(personas["charlie"], "viewer")
    charlie = Client()
    charlie.force_login(personas["charlie"])
    ids = [runs["g1"].pk, runs["p1"].pk]
    assert charlie.post("/t/acme/runs/actions/", {"action": "archive", "run": ids}).status_code == 403
    assert charlie.post("/t/acme/runs/delete/", {"run": ids}).status_code == 403
    assert Run.objects.filter(pk__in=ids, archived_at__isnull=True).count() == 2
    compare = charlie.post("/t/acme/runs/actions/", {"action": "compare", "run": ids})
    page = charlie.get(compare["Location"]).content.decode()
    assert "algorithm.kl_coef" in page and "params.lr" in page and "3e-6" in page
    table_page = charlie.get("/t/acme/runs/").content.decode()
    assert 'value="archive"' not in table_page and 'value="delete"' not in table_page
