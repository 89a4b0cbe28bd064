"""Datasets: immutable parquet files in the data contract, one per content hash per team.

A dataset is born ``pending``; the shared validator (tasks_lib.validate) makes it ``valid`` (with
its stats), ``unmapped`` (its only problem: data_source values no reward scores; the file is kept and
the dataset's page asks for a reward per value, stored in ``reward_map``) or ``invalid`` (with the
problems naming row and column, and its file removed). Only valid datasets can be used by a run.
Runs name them as ``dataset:<id>`` in ``data.train_path``; the dataset's reward mapping is frozen
into them (``data.rewards``). Archived datasets are hidden from the pickers; a dataset no run uses
can be deleted (docs/datasets.md).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Container, Iterable, Mapping
from pathlib import Path
from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.celery import enqueue_on_commit
from webapp.datasets import files, parquet
from webapp.guarded import guarded_update
from webapp.records import CreatedRecord, WorkRecord

logger = logging.getLogger(__name__)

# The tasks this module queues, by name (webapp.celery.enqueue_on_commit): webapp/datasets/tasks.py
# imports this module.
VALIDATE_DATASET_TASK = "webapp.datasets.tasks.validate_dataset"
PREPARE_RECIPE_TASK = "webapp.datasets.tasks.prepare_recipe"
DATASET_REF_PREFIX = "dataset:"
MAX_PROBLEMS_KEPT = 50


class DatasetStatus(models.TextChoices):
    PENDING = "pending"
    VALID = "valid"
    UNMAPPED = "unmapped", "needs a reward mapping"
    INVALID = "invalid"


class DatasetInUse(ValueError):
    """A dataset that runs or experiments use cannot be deleted."""


# What tells whether a dataset is used: the experiments app registers its check (an experiment's or a
# run's config names it) from its AppConfig.ready(), since datasets imports no app above it
# (docs/architecture.md#layers).
DATASET_USES: list[Callable[[Dataset], bool]] = []


def register_dataset_use(check: Callable[[Dataset], bool]) -> None:
    if check not in DATASET_USES:
        DATASET_USES.append(check)


def _agent_rule(agent_name: str, aliases: Container[str]) -> str:
    """Why rows of this agent_name run the flow they run (the dataset page's routing table)."""
    if not agent_name:
        return "the run's default flow"
    return "another project's name for it" if agent_name in aliases else "our flow of that name"


def reward_defaults(rewards: Iterable[Any]) -> dict[str, str]:
    """data_source → reward name of a team's rewards registered for a data_source (TeamReward rows):
    what scores a data_source no dataset mapping names."""
    return {reward.data_source: reward.name for reward in rewards if reward.data_source}


class Dataset(CreatedRecord):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64, help_text="SHA-256 of the file: the dataset's identity.")
    size_bytes = models.BigIntegerField()
    status = models.CharField(max_length=10, choices=DatasetStatus.choices, default=DatasetStatus.PENDING)
    problems = models.JSONField(
        default=list, blank=True, help_text="The validator's problems: row, column, message."
    )
    stats = models.JSONField(
        default=dict, blank=True, help_text="rows, data_sources, prompt_length histogram."
    )
    source = models.CharField(
        max_length=300, blank=True, help_text="Where it came from: an upload or a recipe."
    )
    reward_map = models.JSONField(
        default=dict, blank=True, help_text="data_source → reward function, chosen on the dataset's page."
    )
    archived = models.BooleanField(
        default=False, help_text="Hidden from the pickers; runs that use it keep it."
    )
    derived_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="derived",
        help_text="The dataset this one was made from (generated demonstrations).",
    )
    validated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(fields=["team", "sha256"], name="one_dataset_per_content_per_team")
        ]

    def __str__(self) -> str:
        rows = self.stats.get("rows")
        return f"{self.name} ({rows} rows)" if rows is not None else self.name

    @property
    def path(self) -> Path:
        return files.stored_path(self.team_id, self.sha256)

    @property
    def reference(self) -> str:
        return f"{DATASET_REF_PREFIX}{self.pk}"

    @property
    def is_usable(self) -> bool:
        return self.status == DatasetStatus.VALID

    @classmethod
    def usable_for(cls, team: Team) -> models.QuerySet[Dataset]:
        return cls.objects.filter(team=team, status=DatasetStatus.VALID)

    @classmethod
    def offered_to(cls, team: Team) -> models.QuerySet[Dataset]:
        """What the pickers list: usable and not archived."""
        return cls.usable_for(team).filter(archived=False)

    @classmethod
    def resolve(cls, team: Team, reference: str | None) -> Dataset | None:
        """The usable dataset of ``team`` that ``dataset:<id>`` names, else None."""
        if not reference or not reference.startswith(DATASET_REF_PREFIX):
            return None
        pk = reference.removeprefix(DATASET_REF_PREFIX)
        # 18 digits: any more and the id cannot be a bigint primary key (nor is it ours).
        return cls.usable_for(team).filter(pk=int(pk)).first() if pk.isdigit() and len(pk) <= 18 else None

    @classmethod
    def from_file(
        cls,
        team: Team,
        path: Path,
        *,
        sha256: str,
        name: str,
        source: str,
        user: Any = None,
        validate_later: bool = True,
    ) -> tuple[Dataset, bool]:
        """Adopt the file at ``path`` (it is moved or deleted); same content twice gives the existing
        dataset, validated again when its verdict was "invalid": what makes a file valid (the registered
        rewards, tools and envs, the validator itself) may have been fixed since."""
        existing = cls.objects.filter(team=team, sha256=sha256).first()
        if existing is not None and existing.status == DatasetStatus.INVALID:
            files.move_into_place(path, team.pk, sha256)  # the invalid file itself was deleted
            return existing, existing._validate_again(validate_later)
        if existing is not None:
            path.unlink(missing_ok=True)
            return existing, False
        size = path.stat().st_size
        files.move_into_place(path, team.pk, sha256)
        try:
            with transaction.atomic():
                dataset = cls.objects.create(
                    team=team,
                    name=name[:200],
                    sha256=sha256,
                    size_bytes=size,
                    source=source[:300],
                    created_by=user,
                )
        except IntegrityError:
            # Race: the same content uploaded twice at once; the unique (team, sha256) lets one row win,
            # and both moved identical bytes to the same place.
            return cls.objects.get(team=team, sha256=sha256), False
        if validate_later:
            enqueue_on_commit(VALIDATE_DATASET_TASK, dataset.pk)
        return dataset, True

    def validation_context(self, reward_map: Mapping[str, str] | None = None) -> Any:
        """What the validator checks this file against: its mapping (or ``reward_map`` in its place)
        and the team's rewards and tools."""
        from tasks_lib.validate import Context
        from webapp.tools.models import TeamReward, TeamTool

        rewards = TeamReward.objects.filter(team=self.team)
        mapping = self.reward_map if reward_map is None else reward_map
        return Context(
            reward_map={**reward_defaults(rewards), **mapping},
            team_rewards=[reward.name for reward in rewards],
            team_tools=list(TeamTool.objects.filter(team=self.team).values_list("name", flat=True)),
        )

    def validate(self) -> bool:
        """Run the shared validator and settle the status; True when this call settled it."""
        if self.status != DatasetStatus.PENDING:
            return False
        try:
            problems = parquet.problems_in(self.path, self.validation_context())
            stats = {} if problems else parquet.compute_stats(self.path)
        except Exception as exc:
            # A validator or reader bug must not leave the dataset pending for ever; it is unusable.
            logger.exception("validating dataset %s failed", self.pk)
            problems, stats = [{"row": None, "column": None, "message": f"validation failed: {exc}"}], {}
        if problems and all(problem.get("data_source") for problem in problems):
            # Only rewards are missing: the file is fine, and the dataset's page asks for a mapping.
            return self._settle(DatasetStatus.UNMAPPED, problems=problems[:MAX_PROBLEMS_KEPT])
        if problems:
            settled = self._settle(DatasetStatus.INVALID, problems=problems[:MAX_PROBLEMS_KEPT])
            if settled:
                self.path.unlink(missing_ok=True)  # nothing may ever read an invalid file
            return settled
        return self._settle(DatasetStatus.VALID, stats=stats, problems=[])

    @property
    def unmapped_sources(self) -> list[str]:
        return sorted(
            {p["data_source"] for p in self.problems if isinstance(p, dict) and p.get("data_source")}
        )

    @property
    def data_sources(self) -> list[str]:
        """The data_source values of the file (those no reward knew, while it waits for a mapping)."""
        return sorted(self.stats.get("data_sources", {})) or self.unmapped_sources

    def routes_without_mapping(self) -> dict[str, str | None]:
        """Each data_source of the file → the reward that scores it when the dataset maps it to none
        (the team's reward for it, then the routing table), or None: it must be mapped."""
        from tasks_lib.registry import load_recipes
        from trainer.rewards import route

        load_recipes()
        defaults = reward_defaults(self.team.rewards.all())
        return {source: route(source, defaults).reward for source in self.data_sources}

    def remapped(self, mapping: Mapping[str, str]) -> dict[str, str]:
        """The dataset's mapping with ``mapping``'s choices over it; a choice "" removes that data_source's."""
        changed = {**self.reward_map, **mapping}
        return {source: reward for source, reward in changed.items() if reward}

    def mapping_problems(self, mapping: Mapping[str, str]) -> list[dict[str, Any]]:
        """What the validator finds in the file with ``mapping`` applied (:meth:`remapped`): a mapping
        that would make a valid dataset unusable is refused before anything changes."""
        context = self.validation_context(self.remapped(mapping))
        return parquet.problems_in(self.path, context)[:MAX_PROBLEMS_KEPT]

    def map_rewards(self, mapping: dict[str, str]) -> bool:
        """Store data_source → reward choices ("" removes one) and validate the file again with them."""
        # Race: two mapping forms sent at once, or one sent while the validator settles; only a
        # dataset that waits for (or already has) a mapping goes back to pending, once.
        changed = Dataset.objects.filter(
            pk=self.pk, status__in=(DatasetStatus.UNMAPPED, DatasetStatus.VALID)
        ).update(reward_map=self.remapped(mapping), status=DatasetStatus.PENDING, problems=[])
        self.refresh_from_db()
        if changed:
            enqueue_on_commit(VALIDATE_DATASET_TASK, self.pk)
        return changed == 1

    def effective_reward_map(self) -> dict[str, str]:
        """The data_source → reward choices a run on this dataset freezes (its mapping over the team's
        rewards registered for a data_source), for the data sources the file holds."""
        sources = set(self.stats.get("data_sources", {})) or set(self.unmapped_sources)
        chosen = dict(self.validation_context().reward_map)
        return {source: chosen[source] for source in sorted(sources) if source in chosen}

    def routing(self) -> dict[str, list[dict[str, Any]]]:
        """How each data_source and agent_name of the file is routed (the dataset page's table)."""
        from tasks_lib.registry import load_recipes
        from trainer.flows import FLOWS
        from trainer.rewards import route

        load_recipes()
        chosen = self.validation_context().reward_map
        counts = dict(self.stats.get("data_sources", {})) or dict.fromkeys(self.unmapped_sources, None)
        sources = [
            {
                "value": value,
                "rows": rows,
                "reward": routing.reward,
                "rule": routing.rule,
                "why": routing.why,
                "reward_rule": routing.reward_rule,  # the default, data.reward_rule's (a run may switch)
                "other": routing.other,
            }
            for value, rows in counts.items()
            for routing in [route(value, chosen)]
        ]
        agents = [
            {
                "value": value or "(none)",
                "rows": rows,
                "flow": FLOWS.canonical(value) if value in FLOWS else None,
                "rule": _agent_rule(value, FLOWS.aliases()),
            }
            for value, rows in dict(self.stats.get("agent_names", {})).items()
        ]
        return {"data_sources": sources, "agent_names": agents}

    def reward_map_over(self, team_defaults: Mapping[str, str]) -> dict[str, str]:
        """data_source → reward: this dataset's mapping over the team's rewards registered for a
        data_source (``team_defaults``, :func:`reward_defaults`)."""
        return {**team_defaults, **self.reward_map}

    @property
    def holds_demonstrations(self) -> bool:
        """Whether the file is SFT demonstrations (docs/sft.md#demonstrations) rather than RL rows."""
        from trainer.contract import MESSAGES_KEY

        return bool(self.stats) and self.stats.get("layout") == MESSAGES_KEY

    def task_mismatch(self, task: str, team_defaults: Mapping[str, str] | None = None) -> str | None:
        """Why this dataset does not fit ``task`` (its rows are scored by another recipe's reward), or
        None when it fits. Rows scored by a reward no recipe owns (math, a team's) fit every task.
        ``team_defaults``: the team's :func:`reward_defaults`, when the caller read them once for many."""
        others = self.other_tasks_rewards(task, team_defaults)
        if not others:
            return None
        return (
            f"{self.name}'s rows are scored by the {', '.join(others)} reward, not {task}'s: "
            f"choose a {task} dataset, or the task {others[0]}"
        )

    def other_tasks_rewards(self, task: str, team_defaults: Mapping[str, str] | None = None) -> list[str]:
        """The rewards of recipes other than ``task``'s that score rows of this dataset: the one rule
        of whether a dataset fits a task (empty: it fits), for acceptance and the pickers alike."""
        from tasks_lib.registry import load_recipes
        from trainer.rewards import route

        recipes = load_recipes()
        if task not in recipes:
            return []
        # By the lenient rule, whose rewards are the recipes' own: a verl rule scores the same task.
        owned = {route(recipes.get(name).data_source, rule="lenient").reward for name in recipes.names()}
        wanted = route(recipes.get(task).data_source, rule="lenient").reward
        if team_defaults is None:
            chosen = self.validation_context().reward_map
        else:
            chosen = self.reward_map_over(team_defaults)
        routed = {route(source, chosen, "lenient").reward for source in self.stats.get("data_sources", {})}
        return sorted(
            str(reward) for reward in routed if reward is not None and reward in owned and reward != wanted
        )

    def is_used(self) -> bool:
        """Whether an experiment or run names this dataset (their configs hold ``dataset:<id>``)."""
        return any(check(self) for check in DATASET_USES)

    def set_archived(self, archived: bool) -> None:
        Dataset.objects.filter(pk=self.pk).update(archived=archived)
        self.archived = archived

    def delete_unused(self) -> None:
        """Delete the dataset and its file; DatasetInUse when an experiment or run names it."""
        with transaction.atomic():
            # Race: an experiment created while this runs; the row lock holds until the delete.
            Dataset.objects.select_for_update().filter(pk=self.pk).first()
            if self.is_used():
                raise DatasetInUse(f"{self.name} is used by experiments or runs: archive it instead")
            path = self.path
            self.delete()
        path.unlink(missing_ok=True)

    def _validate_again(self, later: bool) -> bool:
        # Race: the same invalid content uploaded twice at once; only one invalid → pending wins, and
        # both moved identical bytes to the same place.
        changed = guarded_update(
            self,
            Q(status=DatasetStatus.INVALID),
            status=DatasetStatus.PENDING,
            problems=[],
            validated_at=None,
        )
        if changed and later:
            enqueue_on_commit(VALIDATE_DATASET_TASK, self.pk)
        return changed

    def settle_checked(self, stats: dict[str, Any]) -> bool:
        """Valid, with ``stats``: a file its maker checked row by row as it wrote it (generated
        demonstrations, each conversation checked against the chat-messages contract)."""
        return self._settle(DatasetStatus.VALID, stats=stats, problems=[])

    def _settle(self, status: str, **changes: Any) -> bool:
        # Race: a redelivered validate task running beside the first; only one pending → settled wins.
        return guarded_update(
            self, Q(status=DatasetStatus.PENDING), status=status, validated_at=timezone.now(), **changes
        )

    def rows(self, page: int, per_page: int) -> list[parquet.PreviewRow]:
        if not self.is_usable:
            return []
        return parquet.read_rows(self.path, (page - 1) * per_page, per_page)

    def histogram_bars(self, width: int = 600, height: int = 160) -> list[dict[str, Any]]:
        """Rectangles of the prompt-length histogram for the server-side SVG."""
        histogram = self.stats.get("prompt_length") or {}
        counts: list[int] = histogram.get("counts") or []
        edges: list[int] = histogram.get("edges") or []
        if not counts:
            return []
        tallest, bar_width = max(counts), width / len(counts)
        bars = []
        for i, count in enumerate(counts):
            bar_height = round(height * count / tallest, 1) if tallest else 0
            bars.append(
                {
                    "x": round(i * bar_width, 1),
                    "y": round(height - bar_height, 1),
                    "width": round(bar_width - 1, 1),
                    "height": bar_height,
                    "count": count,
                    "low": edges[i],
                    "high": edges[i + 1] - 1,
                }
            )
        return bars


class ImportStatus(models.TextChoices):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class RecipeImport(WorkRecord):
    """One "create from a built-in recipe": the recipe's prepare, run by a Celery worker."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="recipe_imports")
    task = models.CharField(max_length=100)
    input_path = models.CharField(
        max_length=500,
        blank=True,
        help_text="Server-side raw data (staff only); blank: the recipe's fixtures.",
    )
    options = models.JSONField(
        default=dict, blank=True, help_text="PrepareOptions fields: size, val_fraction, seed, from_package."
    )
    status = models.CharField(max_length=10, choices=ImportStatus.choices, default=ImportStatus.PENDING)
    message = models.TextField(blank=True)
    datasets = models.ManyToManyField(Dataset, blank=True, related_name="imports")

    def __str__(self) -> str:
        return f"{self.task} from {self.origin}"

    @property
    def origin(self) -> str:
        """Where the items come from, as the datasets' names and the preparations list say it."""
        from tasks_lib.registry import load_recipes

        recipes = load_recipes()
        generated = self.options.get("size") and self.task in recipes and recipes.get(self.task).generates
        origin = self.input_path or (
            "packaged items" if self.options.get("from_package") else "generated" if generated else "fixtures"
        )
        if self.options.get("size"):
            origin += f", size {self.options['size']}, seed {self.options.get('seed', 0)}"
        level = (self.options.get("extra") or {}).get("level")
        return f"{origin}, level {level}" if level else origin

    @classmethod
    def start(
        cls, team: Team, task: str, input_path: str, user: Any, options: dict[str, Any] | None = None
    ) -> RecipeImport:
        recipe_import = cls.objects.create(
            team=team, task=task, input_path=input_path, created_by=user, options=options or {}
        )
        enqueue_on_commit(PREPARE_RECIPE_TASK, recipe_import.pk)
        return recipe_import

    def run(self) -> bool:
        """Prepare the recipe's splits and adopt each as a (validated) dataset."""
        if self.status != ImportStatus.PENDING:
            return False
        try:
            datasets = self._prepare_splits()
        except Exception as exc:
            # Recipes read user-named raw files: any failure is the import's outcome, shown to the user.
            logger.warning("recipe import %s failed", self.pk, exc_info=True)
            return self._finish(ImportStatus.FAILED, f"{type(exc).__name__}: {exc}")
        self.datasets.add(*datasets)
        summary = ", ".join(f"{d.name}: {d.status}" for d in datasets) or "the recipe wrote no files"
        return self._finish(ImportStatus.DONE, summary)

    def splits(self) -> dict[str, Dataset]:
        """{split: dataset} of what this import prepared, the split read from the name it gave each
        (a file whose content the team had before keeps that dataset's own name: no split)."""
        found = {}
        for dataset in self.datasets.all():
            recipe, split, *_ = [*dataset.name.split(" ", 2), "", ""]
            if recipe == self.task and split:
                found[split] = dataset
        return found

    def _prepare_splits(self) -> list[Dataset]:
        from tasks_lib.registry import PrepareOptions, load_recipes

        recipe = load_recipes().get(self.task)
        origin = self.origin
        datasets = []
        with tempfile.TemporaryDirectory(dir=files.incoming_dir()) as out:
            # As `python -m tasks_lib prepare --fixtures` does: the fixtures folder is the input.
            # With a size, None: generated recipes (arithmetic, webshop) make that many items; the
            # others read their fixtures for None too.
            source = (
                Path(self.input_path)
                if self.input_path
                else None
                if self.options.get("size")
                else recipe.fixtures
            )
            written = recipe.prepare(source, Path(out), PrepareOptions(**self.options))
            for split, path in sorted(written.items()):
                dataset, _ = Dataset.from_file(
                    self.team,
                    Path(path),
                    sha256=files.sha256_of(Path(path)),
                    name=f"{recipe.name} {split} ({origin})",  # the split as splits() reads it back
                    source=f"recipe {recipe.name}, split {split}, from {origin}",
                    user=self.created_by,
                    validate_later=False,
                )
                dataset.validate()  # already in a worker: no second task
                datasets.append(dataset)
        return datasets

    def _finish(self, status: str, message: str) -> bool:
        # Race: a redelivered prepare task; only the first pending → finished counts.
        return guarded_update(
            self, Q(status=ImportStatus.PENDING), status=status, message=message, finished_at=timezone.now()
        )
