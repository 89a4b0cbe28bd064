from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from webapp.accounts.models import Role


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100)


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="An existing user's username.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self) -> object:
        username = self.cleaned_data["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError(f"No user named {username!r}.")
        return user


class SwitchTeamForm(forms.Form):
    team = forms.SlugField()


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'notebook'.")
