from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.utils import timezone

from webapp.accounts.models import Role


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100)


class AddMemberForm(forms.Form):
    username = forms.CharField(
        max_length=150, label="Username", help_text="Someone who already has an account here."
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER, label="Role")

    def clean_username(self) -> object:
        username = self.cleaned_data["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError(f"No user named {username!r}. Create their account below instead.")
        return user


class CreateMemberForm(forms.Form):
    """A new account, straight into the team: the owner passes the first password on."""

    new_username = forms.CharField(max_length=150, label="Username")
    email = forms.EmailField(required=False, label="Email")
    password = forms.CharField(
        label="First password",
        widget=forms.PasswordInput(render_value=True),
        strip=False,
        help_text="Pass it on; they change it under Password once they have logged in.",
    )
    new_role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER, label="Role")

    def clean_new_username(self) -> str:
        username: str = self.cleaned_data["new_username"].strip()
        users = get_user_model()
        users.username_validator(username)
        if users.objects.filter(username=username).exists():
            raise forms.ValidationError(f"{username!r} already has an account: add them above.")
        return username

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        password = cleaned.get("password")
        if password:
            probe = get_user_model()(
                username=cleaned.get("new_username") or "", email=cleaned.get("email") or ""
            )
            try:
                password_validation.validate_password(password, probe)
            except forms.ValidationError as error:
                self.add_error("password", error)
        return cleaned


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices, label="Role")


class SwitchTeamForm(forms.Form):
    team = forms.SlugField()


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, label="Name", help_text="What the token is for, e.g. 'notebook'.")
    read_only = forms.BooleanField(
        required=False, label="Read only", help_text="It may read everything you can, and change nothing."
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Expires after (days)",
        help_text="Blank: until revoked.",
    )

    def scopes(self) -> list[str]:
        return ["read"] if self.cleaned_data.get("read_only") else ["read", "write"]

    def expires(self) -> Any:
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None
