from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0003_apitoken_scopes_expiry")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                help_text="The token that issued this one over the API: revoking it revokes this one too.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="children",
                to="accounts.apitoken",
            ),
        ),
    ]
