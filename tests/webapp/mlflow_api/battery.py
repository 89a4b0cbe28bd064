"""One battery of official-client calls (what a training script, a notebook and a registry user do),
run by the differential test against our endpoint and against MLflow's own server: every call's
answer, or its error code, normalised (ids by what they name, times dropped) so the two compare.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf.json_format import MessageToDict

# Answers that name time: dropped, both servers stamp their own.
_TIME = re.compile(r"(time|timestamp)(_ms)?$")
_HEX_ID = re.compile(r"[0-9a-f]{32}|m-[0-9a-f]{32}|tr-[0-9a-f]{32}")


class Battery:
    """Calls one client; keeps each call's answer by name, ids replaced by labels."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.answers: dict[str, Any] = {}
        self.labels: dict[str, str] = {}

    def label(self, value: Any, name: str) -> None:
        if value is not None:
            self.labels[str(value)] = name

    def call(self, name: str, method: str, /, *args: Any, **kwargs: Any) -> Any:
        from mlflow.exceptions import MlflowException

        assert name not in self.answers, name
        try:
            result = getattr(self.client, method)(*args, **kwargs)
        except MlflowException as error:
            self.answers[name] = {"error": error.error_code}
            return None
        except Exception as error:  # a client that cannot parse the answer is a difference too
            self.answers[name] = {"crash": type(error).__name__}
            return None
        self.answers[name] = result
        return result

    def normalised(self) -> dict[str, Any]:
        # A bare string answer is create_experiment's new id.
        return {name: self._scrub(_plain(answer), "experiment_id") for name, answer in self.answers.items()}

    def _scrub(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: "<time>" if _TIME.search(k) else self._scrub(v, k) for k, v in sorted(value.items())}
        if isinstance(value, list):
            items = [self._scrub(v, key) for v in value]
            if items and all(isinstance(i, dict) and "key" in i for i in items):
                items.sort(key=lambda i: (str(i["key"]), str(i.get("step", ""))))
            return items
        if isinstance(value, str) and key not in _PLAIN_VALUES:
            for raw, name in sorted(self.labels.items(), key=lambda kv: -len(kv[0])):
                value = _swap(value, raw, name, whole=key == "experiment_id")
            return _HEX_ID.sub("<id>", value)
        return value


# Values that are never ids (a step "1" is not experiment 1).
_PLAIN_VALUES = {"step", "value", "key", "name", "digest"}


def _swap(value: str, raw: str, name: str, *, whole: bool) -> str:
    """Run and model ids are long and replaced anywhere; an experiment id is a short number,
    replaced as the whole of an experiment_id or as a path segment of a URI."""
    if len(raw) >= 32:
        return value.replace(raw, name)
    if value == raw:
        return name if whole else value
    return re.sub(rf"(?<=[:/]){re.escape(raw)}(?=/|$)", name, value)


def _plain(answer: Any) -> Any:
    """Entities as their proto's JSON (the wire shape), lists and pages as lists."""
    if answer is None or isinstance(answer, str | int | float | bool):
        return answer
    if isinstance(answer, dict):
        return {str(k): _plain(v) for k, v in answer.items()}
    if isinstance(answer, list | tuple):
        plain = [_plain(v) for v in answer]
        token = getattr(answer, "token", None)
        return {"items": plain, "has_next_page": bool(token)} if hasattr(answer, "token") else plain
    if hasattr(answer, "to_proto"):
        return MessageToDict(answer.to_proto(), preserving_proto_field_name=True)
    if hasattr(answer, "to_dictionary"):
        return _plain(answer.to_dictionary())
    return repr(type(answer))


def names(runs: Any) -> list[str]:
    return [run.info.run_name for run in runs] if runs is not None else ["<error>"]


# -- the battery -------------------------------------------------------------------------------------


def run_battery(battery: Battery) -> None:
    for part in (_experiments, _runs, _search, _lifecycle, _inputs_and_artifacts, _logged_models):
        part(battery)


def _experiments(b: Battery) -> None:
    default = b.call("get default experiment", "get_experiment", "0")
    b.label(getattr(default, "experiment_id", None), "exp-default")
    b.call("get default by name", "get_experiment_by_name", "Default")
    b.call("search experiments, fresh", "search_experiments")
    a = b.call("create experiment", "create_experiment", "battery-a")
    b.label(a, "exp-a")
    tagged = b.call("create experiment with tags", "create_experiment", "battery-b", tags={"team": "rl"})
    b.label(tagged, "exp-b")
    b.call("create experiment twice", "create_experiment", "battery-a")
    b.call("get experiment", "get_experiment", a)
    b.call("get experiment with tags", "get_experiment", tagged)
    b.call("get experiment by unknown name", "get_experiment_by_name", "no-such-experiment")
    b.call("get unknown experiment", "get_experiment", "987654321")
    b.call("get experiment with a bad id", "get_experiment", "not-a-number")
    b.call("set experiment tag", "set_experiment_tag", a, "owner", "rl-team")
    b.call("get experiment after tag", "get_experiment", a)
    b.call("delete experiment tag", "delete_experiment_tag", a, "owner")
    b.call("get experiment after tag delete", "get_experiment", a)
    b.call("rename experiment", "rename_experiment", tagged, "battery-b2")
    b.call("get renamed experiment", "get_experiment_by_name", "battery-b2")
    b.call("search experiments by name", "search_experiments", filter_string="name LIKE 'battery%'")
    b.call("search experiments ordered", "search_experiments", order_by=["name DESC"])
    b.call("search experiments by tag", "search_experiments", filter_string="tags.team = 'rl'")
    b.call("search experiments, one page", "search_experiments", max_results=1)


def _experiment_id(b: Battery, name: str) -> str:
    found = b.client.get_experiment_by_name(name)
    return found.experiment_id


def _runs(b: Battery) -> None:
    a = _experiment_id(b, "battery-a")
    for index, (name, lr, loss) in enumerate(
        (("first", "0.1", 0.5), ("second", "0.01", 0.3), ("third", "0.001", 0.9))
    ):
        run = b.call(
            f"create run {name}",
            "create_run",
            a,
            run_name=name,
            tags={"stage": "sft" if index == 0 else "rl"},
        )
        run_id = run.info.run_id
        b.label(run_id, f"run-{name}")
        b.call(f"log param {name}", "log_param", run_id, "lr", lr)
        for step in range(3):
            b.call(
                f"log metric {name} {step}",
                "log_metric",
                run_id,
                "loss",
                loss + step / 100,
                timestamp=1_700_000_000_000 + step,
                step=step,
            )
    first = _run_id(b, "first")
    from mlflow.entities import Metric, Param, RunTag

    b.call("log batch", "log_batch", first, metrics=[Metric("acc", 0.7, 1_700_000_000_000, 2)],
           params=[Param("algo", "grpo")], tags=[RunTag("note", "batched")])  # fmt: skip
    b.call("set tag", "set_tag", _run_id(b, "second"), "note", "to delete")
    b.call("delete tag", "delete_tag", _run_id(b, "second"), "note")
    b.call("delete unknown tag", "delete_tag", _run_id(b, "second"), "never-set")
    b.call("get run", "get_run", first)
    b.call("get run after tag delete", "get_run", _run_id(b, "second"))
    b.call("metric history", "get_metric_history", first, "loss")
    b.call("log a param again, changed", "log_param", first, "lr", "0.5")
    b.call("log a param again, same", "log_param", first, "lr", "0.1")
    b.call("get unknown run", "get_run", "0" * 32)
    b.call("log metric to unknown run", "log_metric", "0" * 32, "loss", 1.0)


def _run_id(b: Battery, name: str) -> str:
    return next(raw for raw, label in b.labels.items() if label == f"run-{name}")


def _search(b: Battery) -> None:
    a = _experiment_id(b, "battery-a")
    first, second = _run_id(b, "first"), _run_id(b, "second")

    def search(name: str, **kwargs: Any) -> None:
        b.call(name, "search_runs", [a], **kwargs)
        b.answers[name] = names(b.answers[name]) if not isinstance(b.answers[name], dict) else b.answers[name]

    search("runs, default order")
    search("runs by metric desc", order_by=["metrics.loss DESC"])
    search("runs by metric asc", order_by=["metrics.loss"])
    search("runs by param", order_by=["params.lr ASC"])
    search("runs by tag then name", order_by=["tags.stage DESC", "attributes.run_name ASC"])
    search("runs by name attribute", order_by=["attributes.run_name DESC"])
    search("runs by start time", order_by=["attributes.start_time ASC"])
    search("runs, metric filter", filter_string="metrics.loss < 0.6")
    search("runs, param filter", filter_string="params.lr = '0.1'")
    search("runs, tag filter", filter_string="tags.stage = 'rl'")
    search("runs, run_id IN", filter_string=f"attributes.run_id IN ('{first}', '{second}')")
    search("runs, param IN", filter_string="params.lr IN ('0.1', '0.001')")
    search("runs, tag NOT IN", filter_string="tags.stage NOT IN ('sft')")
    search("runs, status filter", filter_string="attributes.status = 'RUNNING'")
    search("runs, name LIKE", filter_string="attributes.run_name LIKE 's%'")
    search("runs, bad filter", filter_string="metrics.loss <> 1")
    search("runs, bad order", order_by=["metrics.loss SIDEWAYS"])
    b.call("runs, one page", "search_runs", [a], max_results=2)
    b.call("runs of an unknown experiment", "search_runs", ["987654321"])
    b.call("runs of the default experiment", "search_runs", ["0"])
    b.call("runs, full answer", "search_runs", [a], filter_string=f"attributes.run_id = '{first}'")


def _lifecycle(b: Battery) -> None:
    from mlflow.entities import ViewType

    a = _experiment_id(b, "battery-a")
    third = _run_id(b, "third")

    def search(name: str, view: int) -> None:
        found = b.call(name, "search_runs", [a], run_view_type=view)
        if found is not None:
            b.answers[name] = names(found)

    b.call("delete run", "delete_run", third)
    b.call("get deleted run", "get_run", third)
    search("active runs after delete", ViewType.ACTIVE_ONLY)
    search("deleted runs", ViewType.DELETED_ONLY)
    search("all runs", ViewType.ALL)
    b.call("restore run", "restore_run", third)
    search("deleted runs after restore", ViewType.DELETED_ONLY)
    b.call("delete unknown run", "delete_run", "0" * 32)
    b.call("end run", "set_terminated", _run_id(b, "first"))
    b.call("end run failed", "set_terminated", _run_id(b, "second"), status="FAILED")
    b.call("get ended run", "get_run", _run_id(b, "first"))
    b.call("runs, finished", "search_runs", [a], filter_string="attributes.status = 'FINISHED'")
    doomed = b.call("create doomed experiment", "create_experiment", "battery-doomed")
    b.label(doomed, "exp-doomed")
    b.call("delete experiment", "delete_experiment", doomed)
    b.call("get deleted experiment", "get_experiment", doomed)
    b.call("deleted experiments", "search_experiments", view_type=ViewType.DELETED_ONLY)
    b.call("all experiments", "search_experiments", view_type=ViewType.ALL, order_by=["name ASC"])
    b.call("restore experiment", "restore_experiment", doomed)
    b.call("active experiments after restore", "search_experiments", order_by=["name ASC"])


def _inputs_and_artifacts(b: Battery) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    third = _run_id(b, "third")
    dataset = Dataset(
        "gsm8k-train", "d1g3st", "local", '{"uri": "/data/gsm8k.parquet"}', '{"rows": 7473}', "parquet"
    )
    context = [InputTag("mlflow.data.context", "training")]
    b.call("log inputs", "log_inputs", third, datasets=[DatasetInput(dataset, context)])
    b.call("get run with inputs", "get_run", third)
    b.call("log text artifact", "log_text", third, "hello", "notes/hello.txt")
    b.call("list artifacts", "list_artifacts", third)
    b.call("list artifact folder", "list_artifacts", third, "notes")


def _logged_models(b: Battery) -> None:
    a = _experiment_id(b, "battery-a")
    third = _run_id(b, "third")
    model = b.call("create logged model", "create_logged_model", a, name="policy", source_run_id=third,
                   tags={"stage": "rl"}, params={"lr": "0.001"})  # fmt: skip
    model_id = getattr(model, "model_id", None)
    b.label(model_id, "model-policy")
    b.call("get logged model", "get_logged_model", model_id or "m-" + "0" * 32)
    b.call("set logged model tags", "set_logged_model_tags", model_id or "m-" + "0" * 32, {"owner": "rl"})
    b.call("delete logged model tag", "delete_logged_model_tag", model_id or "m-" + "0" * 32, "stage")
    b.call("log model params", "log_model_params", model_id or "m-" + "0" * 32, {"batch": "64"})
    b.call("log metric on model", "log_metric", third, "acc", 0.9, step=1, timestamp=1_700_000_000_000,
           model_id=model_id)  # fmt: skip
    b.call("log model artifact", "log_model_artifact", model_id or "m-" + "0" * 32, str(_model_file()))
    b.call("list model artifacts", "list_logged_model_artifacts", model_id or "m-" + "0" * 32)
    b.call("finalize logged model", "finalize_logged_model", model_id or "m-" + "0" * 32, "READY")
    b.call("get finalized model", "get_logged_model", model_id or "m-" + "0" * 32)
    b.call("search logged models", "search_logged_models", [a])
    b.call("get unknown logged model", "get_logged_model", "m-" + "0" * 32)


def _model_file() -> Any:
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "MLmodel"
    path.write_text("flavors: {}\n")
    return path
