"""Users belong to teams; every object in the product belongs to exactly one team."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils.text import slugify


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Higher rank includes the rights of the lower ones.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.OWNER: 2}


class Team(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    members: models.ManyToManyField[Any, Any] = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def create_with_owner(cls, name: str, owner: Any) -> Team:
        team = cls.objects.create(name=name, slug=cls._free_slug(name))
        Membership.objects.create(team=team, user=owner, role=Role.OWNER)
        return team

    @classmethod
    def _free_slug(cls, name: str) -> str:
        base = slugify(name)[:90] or "team"
        slug, n = base, 1
        while cls.objects.filter(slug=slug).exists():
            n += 1
            slug = f"{base}-{n}"
        return slug

    def add_member(self, user: Any, role: str) -> Membership:
        membership, _ = Membership.objects.update_or_create(team=self, user=user, defaults={"role": role})
        return membership


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    joined = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]
        ordering = ["team__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    def allows(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]
