"""Datasets in a real browser, with a real Celery worker running the validator."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PASSWORD
from webapp.datasets.models import Dataset, DatasetStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Listens on window, so it runs after the page's own document listener has moved the bar; the value
# survives the redirect that follows the upload in sessionStorage.
RECORD_PROGRESS = """
window.addEventListener("htmx:xhr:progress", () => {
  const bar = document.querySelector("#upload-progress");
  if (bar) sessionStorage.setItem("upload-progress", String(bar.value));
});
"""


def _upload(page: Any, live_server: Any, team_slug: str, path: Path, name: str = "") -> None:
    page.goto(f"{live_server.url}/t/{team_slug}/datasets/")
    page.set_input_files("#upload-form input[name=file]", str(path))
    if name:
        page.fill("#upload-form input[name=name]", name)
    page.click("#upload-form button[type=submit]")


@pytest.mark.slow
def test_alice_uploads_a_parquet_file_and_sees_its_preview(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, good_parquet: Path
) -> None:
    start_worker()
    page = login("alice")
    page.add_init_script(RECORD_PROGRESS)
    _upload(page, live_server, personas["acme"].slug, good_parquet, name="Arithmetic demo")
    page.wait_for_url(re.compile(r"/datasets/\d+/$"))
    page.wait_for_selector("#preview")  # appears once the worker has validated the file

    dataset = Dataset.objects.get()
    assert (dataset.name, dataset.status) == ("Arithmetic demo", DatasetStatus.VALID)
    assert page.evaluate("sessionStorage.getItem('upload-progress')") == "100"
    assert page.locator("[data-stat=rows]").inner_text() == "25"
    assert page.locator("svg.histogram rect").count() == len(dataset.histogram_bars()) > 0
    first = page.locator("#preview .row-card").first
    assert first.locator(".role").all_text_contents() == ["system", "user"]
    question = "Is <b>bold</b> & <script>alert(1)</script> escaped?"
    assert first.locator(".message .content").nth(1).text_content() == question
    assert page.locator("#preview b, #preview script").count() == 0  # shown as text, never as markup
    assert first.locator(".truth code").text_content() == "<i>yes</i>"
    assert page.locator("#preview .row-card").count() == 10

    page.click("text=Next →")
    page.wait_for_selector("text=Rows 10 to 19 of 25")
    assert page.url.endswith("?page=2")


@pytest.mark.slow
def test_a_malformed_file_shows_the_validators_message_and_creates_nothing_usable(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, bad_role_parquet: Path
) -> None:
    start_worker()
    page = login("bob")
    _upload(page, live_server, personas["acme"].slug, bad_role_parquet)
    page.wait_for_url(re.compile(r"/datasets/\d+/$"))
    problem = page.locator(".problems tbody tr").first
    problem.wait_for()
    assert problem.locator("td").all_inner_texts() == [
        "3", "prompt[1].role", "unknown role 'wizard'; use one of assistant, system, tool, user",
    ]  # fmt: skip
    assert page.locator("#preview").count() == 0
    dataset = Dataset.objects.get()
    assert dataset.status == DatasetStatus.INVALID
    assert not Dataset.usable_for(personas["acme"]).exists()
    assert not dataset.path.exists()


def test_an_over_limit_file_is_refused_before_it_is_sent(
    personas: dict[str, Any], login: Any, live_server: Any, good_parquet: Path, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = 1000
    page = login("alice")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url) if request.method == "POST" else None)
    _upload(page, live_server, personas["acme"].slug, good_parquet)
    error = page.locator("#upload-form [data-upload-error]")
    error.wait_for()
    assert (
        error.inner_text()
        == "The file is larger than the upload limit of 1000 bytes (STUDIO_UPLOAD_MAX_BYTES)."
    )
    assert requests == []
    assert not Dataset.objects.exists()


def test_without_javascript_the_server_refuses_an_over_limit_file_with_the_same_message(
    personas: dict[str, Any], browser: Any, live_server: Any, good_parquet: Path, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = 1000
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    _upload(page, live_server, personas["acme"].slug, good_parquet)
    page.wait_for_load_state()
    assert (
        "The file is larger than the upload limit of 1000 bytes" in page.locator("#upload-form").inner_text()
    )
    assert not Dataset.objects.exists()
    context.close()
