"""The experiments page: its title is text only, and the sweeps and the team's run limit sit in its body."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_title_is_plain_text_and_the_run_limit_is_in_the_body(personas: Any) -> None:
    client = Client()
    client.force_login(personas["alice"])
    page = client.get(f"/t/{personas['acme'].slug}/experiments/").content.decode()
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title is not None and "<" not in title.group(1) and "Runs at once" not in title.group(1)
    assert page.count('id="run-limit"') == 1
