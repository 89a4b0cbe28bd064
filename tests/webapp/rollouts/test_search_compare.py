"""Full-text search over stored steps (served by its GIN index) and one prompt across two steps."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import Client

from tests.webapp.trainer_posts import Trainer, trajectory
from webapp.ingestion.models import TrajectoryStep
from webapp.rollouts import search, viewer
from webapp.rollouts.viewer import RolloutFilter


def _with_call(
    uid: str, group: str, reward: float, response: str, tool: str, args: dict[str, Any]
) -> dict[str, Any]:
    body = trajectory(uid, group, reward, response=response)
    body["steps"][0]["tool_calls"] = [{"name": tool, "arguments": args, "result": f"{tool} said hello"}]
    return body


def test_search_finds_a_step_by_its_response_tool_arguments_or_results_and_escapes_them(
    client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    trainer.trajectories(1, [
        _with_call("s1-p0-s0", "s1-p0", 1.0, "the <b>zebra</b> crossed if x < 3 && y", "search", {"query": "okapi facts"}),
        _with_call("s1-p1-s0", "s1-p1", 0.0, "nothing to see", "calc", {"expr": "2+2"}),
    ])  # fmt: skip
    later = _with_call("s2-p0-s0", "s2-p0", 0.0, "a zebra again", "calc", {"expr": "1"})
    trainer.trajectories(2, [{**later, "data_source": "math"}], "t2")
    runs = [run.pk]

    def found(text: str, **filters: Any) -> list[tuple[str, int]]:
        steps = search.search_steps(runs, RolloutFilter(**filters), text)
        return [(s.trajectory.uid, s.index) for s in steps]

    assert found("zebra") == [("s2-p0-s0", 1), ("s1-p0-s0", 1)]  # newest training step first
    first = search.search_steps(runs, RolloutFilter(), "zebra", limit=1)  # found among the newest
    assert [(s.trajectory.uid, s.index) for s in first] == [("s2-p0-s0", 1)]
    assert found("zebra", step=1) == [("s1-p0-s0", 1)]  # the rollout list's filters apply
    assert found("zebra", data_source="math", success=False) == [("s2-p0-s0", 1)]
    assert viewer.data_sources(run) == ["gsm8k", "math"]  # each once, in order, for the filter form
    assert found("okapi") == [("s1-p0-s0", 0)]  # a tool's arguments
    assert found('"search said hello"') == [("s1-p0-s0", 0)]  # a tool's result, as a phrase
    assert found("zebra -again") == [("s1-p0-s0", 1)]
    assert found("giraffe") == []

    client.force_login(personas["alice"])
    page = client.get("/t/acme/search/", {"q": "zebra", "run": run.pk}).content.decode()
    snippet = page.split('<pre class="snippet">')[2].split("</pre>", 1)[0]  # s1-p0-s0's, the second
    assert (
        "&lt; 3 &amp;&amp;" in snippet and '<mark class="hit">zebra</mark>' in snippet
    )  # escaped, then marked
    assert "<b>" not in snippet  # ts_headline drops markup tags; none reach the page as markup
    assert f"/t/acme/runs/{run.pk}/rollouts/" in page and "#step-1" in page
    team_wide = client.get("/t/acme/search/", {"q": "okapi"}).content.decode()
    assert "s1-p0-s0 · step 0" in team_wide
    assert (
        client.get("/t/acme/search/", {"q": "x", "run": "99999999999"}).status_code == 200
    )  # no such run: the team's
    bob = Client()
    bob.force_login(personas["charlie"])
    assert bob.get("/t/acme/search/", {"q": "zebra"}).status_code in (403, 404)


def test_search_is_served_by_the_gin_index(trainer: Trainer, run: Any) -> None:
    trainer.trajectories(1, [trajectory("s1-p0-s0", "s1-p0", 1.0, response="a rare okapi")])
    with connection.cursor() as cursor:
        # 5,000 more steps of common words (as ingestion stores them), then fresh statistics: the
        # planner picks its plan the way it would for a real run.
        cursor.execute(
            """INSERT INTO results_trajectory (run_id, uid, group_id, sample_index, rollout_index, training_step,
                data_source, total_reward, success, metrics, info, num_steps, response_tokens, num_tool_calls,
                num_tool_errors, num_malformed, received)
            SELECT %s, 'bulk' || s, 'g' || s, s, 0, 2, 'gsm8k', 0, false, '{}', '{}', 1, 5, 0, 0, 0, now()
            FROM generate_series(1, 5000) AS s""",
            [run.pk],
        )
        cursor.execute(
            """INSERT INTO results_trajectorystep (trajectory_id, run_id, index, prompt_id, response_id, done,
                num_prompt_tokens, num_response_tokens, info, timings, search)
            SELECT t.id, t.run_id, 0, s.prompt_id, s.response_id, true, 1, 5, '{}', '{}',
                to_tsvector('simple', 'the answer is ' || (t.id % 97))
            FROM results_trajectory t, (SELECT prompt_id, response_id FROM results_trajectorystep LIMIT 1) s
            WHERE t.uid LIKE 'bulk%'""",
        )
        # What autovacuum does between ingestions: move the index's pending entries into its tree.
        # Each partition's (docs/rollouts.md#partitioning).
        cursor.execute(
            "SELECT gin_clean_pending_list(relid) FROM pg_partition_tree('step_search') WHERE isleaf"
        )
        cursor.execute("ANALYZE results_trajectory, results_trajectorystep")
        steps = search.search_by_index([run.pk], RolloutFilter(), "okapi", search.SEARCH_RESULTS)
        sql, params = steps.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on step_search" in plan, plan
    assert [s.trajectory.uid for s in steps] == ["s1-p0-s0"]
    assert [s.trajectory.uid for s in search.search_steps([run.pk], RolloutFilter(), "okapi")] == ["s1-p0-s0"]
    assert not TrajectoryStep.objects.filter(search__isnull=True).exists()  # ingestion indexed every step


def test_one_prompt_at_two_steps_side_by_side_with_diff_deltas_and_tool_path(
    client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    early = _with_call("s1-p3-s0", "s1-p3", 0.0, "I think it is 5", "calc", {"expr": "2+3"})
    late = _with_call("s9-p3-s0", "s9-p3", 1.0, "I know it is 4", "search", {"query": "sum"})
    late["steps"][0]["tool_calls"].append({"name": "calc", "arguments": {"expr": "2+2"}, "result": "4"})
    trainer.trajectories(1, [early])
    trainer.trajectories(9, [late], "t9")
    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/prompts/3/compare/").content.decode()
    assert "step 1 against step 9" in page  # earliest against latest by default
    assert '<td id="reward-delta">+1.000</td>' in page
    assert '<span class="removed">think</span><span class="added">know</span>' in page
    assert '<span class="removed">5</span><span class="added">4</span>' in page
    assert '<span class="added">search</span> → <span class="same">calc</span>' in page
    assert client.get(f"/t/acme/runs/{run.pk}/prompts/4/compare/").status_code == 404


def test_compare_steps_never_sets_a_step_against_itself(
    client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    trainer.trajectories(1, [trajectory("s1-p3-s0", "s1-p3", 0.0)])
    trainer.trajectories(9, [trajectory("s9-p3-s0", "s9-p3", 1.0)], "t9")
    trainer.trajectories(4, [trajectory("s4-p5-s0", "s4-p5", 1.0)], "t4")
    client.force_login(personas["alice"])
    same = client.get(f"/t/acme/runs/{run.pk}/prompts/3/compare/", {"a": 9, "b": 9}).content.decode()
    assert "step 9 against step 1" in same
    latest = client.get(f"/t/acme/runs/{run.pk}/prompts/3/compare/", {"a": 9}).content.decode()
    assert "step 9 against step 1" in latest
    # A row sampled at one step only has nothing to compare with.
    assert client.get(f"/t/acme/runs/{run.pk}/prompts/5/compare/").status_code == 404
