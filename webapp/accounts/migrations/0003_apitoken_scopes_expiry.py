from __future__ import annotations

from django.db import migrations, models

import webapp.accounts.models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_apitoken")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=models.JSONField(
                default=webapp.accounts.models._all_scopes, help_text="read, write (docs/api.md#tokens)."
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires",
            field=models.DateTimeField(blank=True, help_text="None: until revoked.", null=True),
        ),
    ]
