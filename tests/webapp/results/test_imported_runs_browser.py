"""In a real browser: the runs table marks an imported run and its Source column says where it came
from (docs/importers.md#in-the-runs-table). Screenshots at 1440 and 1024 px go to var/shots/mcp/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainer.contract import IMPORT_SOURCE_TAG
from webapp.experiments.models import Experiment, LoggedValue, Run

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "mcp"


def test_an_imported_run_is_marked_with_its_source_in_the_runs_table(
    signed_in: Callable[[str], Any], live_server: Any, transactional_db: Any, personas: dict[str, Any]
) -> None:
    experiment, _ = Experiment.create_external(personas["acme"], "tensorboard", None)
    imported = Run.create_external(experiment, "baseline", None)
    LoggedValue.set_tags(imported, {IMPORT_SOURCE_TAG: "tensorboard:/data/tb/baseline"})
    Run.create_external(experiment, "logged by mlflow", None)

    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/?col=name&col=status&col=kind&col=source&col=steps")
    imported_row = page.locator(f"#runs tbody tr[data-run='{imported.pk}']")
    badge = imported_row.locator(".col-text .badge.kind-imported").first
    assert (
        badge.inner_text() == "imported" and badge.get_attribute("title") == "tensorboard:/data/tb/baseline"
    )
    cells = imported_row.locator("td").all_inner_texts()
    assert "tensorboard /data/tb/baseline" in cells
    other = page.locator("#runs tbody tr", has_text="logged by mlflow")
    assert other.locator(".kind-imported").count() == 0 and "—" in other.locator("td").all_inner_texts()

    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 700})
        page.screenshot(path=str(SHOTS / f"imported-runs-{width}.png"), full_page=True)
