"""Create the first admin account when there is none (run by `make run` after migrating)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.accounts.models import Team


class Command(BaseCommand):
    help = (
        "Create a superuser 'admin' (password from STUDIO_ADMIN_PASSWORD, else generated and printed once)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            return
        username = settings.ADMIN_USERNAME
        password = settings.ADMIN_PASSWORD or secrets.token_urlsafe(12)
        admin = users.objects.create_superuser(username=username, email="", password=password)
        Team.create_with_owner("Default", admin)
        if settings.ADMIN_PASSWORD:
            self.stdout.write(
                f"Created admin account {username!r} with the password from STUDIO_ADMIN_PASSWORD."
            )
        else:
            # Printed once: the hash is all that is kept.
            self.stdout.write(
                self.style.WARNING(f"Created admin account {username!r} with password: {password}")
            )
