"""The dataset pickers of the experiment form: which datasets they list for a task, which one they
preselect, and why they list no others (docs/datasets.md#create-time-checks).

Whether a dataset fits a task is :meth:`Dataset.other_tasks_rewards`, and whether it fits the run's kind
is :attr:`Dataset.holds_demonstrations` (an SFT run trains on demonstrations, an RL run on RL rows): the
rules the acceptance function refuses a config by (webapp.experiments.acceptance.fit_problems), so the
form lists exactly what it would accept. The picker reads the team's datasets and rewards once, however many datasets there are.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from webapp.accounts.models import Team
from webapp.datasets.models import Dataset, ImportStatus, RecipeImport, reward_defaults

NAMED_AT_MOST = 4  # datasets named in the hint per reason; the rest are counted
RECENT_IMPORTS = 10  # a task's recipe preparations looked at for the one to preselect


@dataclass
class Hidden:
    """Datasets of the team a picker does not list, for one reason: (name, detail) each."""

    reason: str
    datasets: list[tuple[str, str]] = field(default_factory=list)

    def sentence(self) -> str:
        named = [f"{name}: {detail}" if detail else name for name, detail in self.datasets[:NAMED_AT_MOST]]
        more = len(self.datasets) - NAMED_AT_MOST
        if more > 0:
            named.append(f"and {more} more")
        return f"{len(self.datasets)} {self.reason} ({'; '.join(named)})"


@dataclass
class DatasetPicker:
    """The datasets the form offers for ``task`` (newest first), what it hides and why, and the
    splits its recipe prepared (preselected)."""

    task: str
    sft: bool
    listed: list[Dataset]
    hidden: list[Hidden]
    kept: list[tuple[Dataset, str]]  # named by the form as sent, though not listed: (dataset, why)
    train: str = ""  # the preselected training dataset's id, or "" for none
    val: str = ""

    @classmethod
    def for_task(
        cls, team: Team, task: str, keep: Collection[str] = (), *, sft: bool = False
    ) -> DatasetPicker:
        """The pickers for ``task`` (of an SFT run with ``sft``). ``keep``: dataset ids the form was sent
        with, listed even when they do not fit (so the acceptance function's refusal, not "not a valid
        choice", says why)."""
        defaults = reward_defaults(team.rewards.all())
        not_valid = Hidden("not valid")
        archived = Hidden("archived")
        misfits = Hidden(f"do not fit the task {task}")
        wrong_kind = Hidden(
            "hold RL rows, not demonstrations" if sft else "hold demonstrations, for an SFT run"
        )
        picker = cls(
            task=task, sft=sft, listed=[], hidden=[misfits, wrong_kind, archived, not_valid], kept=[]
        )
        for dataset in Dataset.objects.filter(team=team).order_by("-created", "-id"):
            others = dataset.other_tasks_rewards(task, defaults) if dataset.is_usable else []
            if not dataset.is_usable:
                not_valid.datasets.append((dataset.name, dataset.get_status_display()))
            elif dataset.archived:
                archived.datasets.append((dataset.name, ""))
            elif others:
                misfits.datasets.append((dataset.name, f"scored by the {', '.join(others)} reward"))
            elif dataset.holds_demonstrations != sft:
                wrong_kind.datasets.append((dataset.name, ""))
            else:
                picker.listed.append(dataset)
                continue
            if dataset.is_usable and str(dataset.pk) in keep:
                picker.kept.append((dataset, "archived" if dataset.archived else "does not fit"))
        picker.hidden = [hidden for hidden in picker.hidden if hidden.datasets]
        picker._preselect(team)
        return picker

    def _preselect(self, team: Team) -> None:
        """The train and val splits of the task recipe's latest preparation whose training split is
        listed; none when there is no such preparation (never "the newest upload")."""
        listed = {dataset.pk for dataset in self.listed}
        imports = RecipeImport.objects.filter(team=team, task=self.task, status=ImportStatus.DONE)
        for recipe_import in imports.prefetch_related("datasets")[:RECENT_IMPORTS]:
            splits = recipe_import.splits()
            train, val = splits.get("train"), splits.get("val")
            if train is not None and train.pk in listed:
                self.train = str(train.pk)
                self.val = str(val.pk) if val is not None and val.pk in listed else ""
                return

    def choices(self) -> list[tuple[str, str]]:
        listed = [(str(dataset.pk), str(dataset)) for dataset in self.listed]
        return listed + [(str(dataset.pk), f"{dataset} — {why}") for dataset, why in self.kept]

    @property
    def hint(self) -> str:
        """Under each picker: what it lists, and why it lists no other dataset of the team."""
        kind = "demonstrations datasets" if self.sft else "datasets"
        listed = f"Lists the valid {kind} whose rows the {self.task} reward scores, or a reward no task owns."
        if self.train:
            listed += f" Chosen: what the {self.task} recipe prepared."
        if not self.hidden:
            return listed
        return f"{listed} Not listed: {'; '.join(hidden.sentence() for hidden in self.hidden)}."
