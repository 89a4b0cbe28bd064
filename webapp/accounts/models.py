"""Users belong to teams; every object in the product belongs to exactly one team."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from webapp.guarded import guarded_update


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

    def change_role(self, membership: Membership, role: str) -> None:
        """Give a member another role; LastOwner when that would leave the team without an owner."""
        with transaction.atomic():
            self._keep_an_owner(membership, leaving=role != Role.OWNER)
            Membership.objects.filter(pk=membership.pk, team=self).update(role=role)

    def remove_member(self, membership: Membership) -> None:
        """Take a member out of the team; LastOwner when they are its only owner."""
        with transaction.atomic():
            self._keep_an_owner(membership, leaving=True)
            Membership.objects.filter(pk=membership.pk, team=self).delete()

    def _keep_an_owner(self, membership: Membership, *, leaving: bool) -> None:
        # Race: two owners demoting (or removing) each other at once. Locking the owner rows makes
        # the second wait for the first; it then no longer counts the first's change as an owner.
        owners = list(
            Membership.objects.select_for_update()
            .filter(team=self, role=Role.OWNER)
            .values_list("pk", flat=True)
        )
        if leaving and owners == [membership.pk]:
            raise LastOwner(
                f"{membership.user} is the only owner of {self.name}: make someone else an owner first."
            )


class LastOwner(ValueError):
    """A change that would leave a team with no owner (nobody could manage its members)."""


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


def _hash_api_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Scope(models.TextChoices):
    """What a personal token may do (docs/api.md#tokens): read is every GET; write is the rest."""

    READ = "read", "Read"
    WRITE = "write", "Read and write"


def _all_scopes() -> list[str]:
    return [Scope.READ, Scope.WRITE]


class ApiToken(models.Model):
    """A personal token for the REST API. Only its SHA-256 is stored; the token is shown once."""

    PREFIX = "sk_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(
        max_length=12, help_text="The first characters, so the owner can tell tokens apart."
    )
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)
    # Tokens issued before scopes existed could do everything: they keep both.
    scopes = models.JSONField(default=_all_scopes, help_text="read, write (docs/api.md#tokens).")
    expires = models.DateTimeField(null=True, blank=True, help_text="None: until revoked.")

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @classmethod
    def issue(
        cls, user: Any, name: str, *, scopes: list[str] | None = None, expires: Any | None = None
    ) -> tuple[ApiToken, str]:
        """A new token for ``user``: (the row, the plain token to show once). Write implies read."""
        plain = cls.PREFIX + secrets.token_urlsafe(32)
        chosen = sorted(set(scopes or _all_scopes()) | {Scope.READ})
        token = cls.objects.create(
            user=user,
            name=name,
            token_hash=_hash_api_token(plain),
            hint=plain[:9],
            scopes=chosen,
            expires=expires,
        )
        return token, plain

    @classmethod
    def find(cls, plain: str) -> ApiToken | None:
        """The live token (unrevoked, unexpired, of an active user) of that text, else None."""
        if not plain.startswith(cls.PREFIX):
            return None
        now = timezone.now()
        token = (
            cls.objects.select_related("user")
            .filter(token_hash=_hash_api_token(plain), revoked__isnull=True, user__is_active=True)
            .filter(Q(expires__isnull=True) | Q(expires__gt=now))
            .first()
        )
        if token is None:
            return None
        if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
            # At most one write a minute per token; a lost race only loses a timestamp.
            cls.objects.filter(pk=token.pk).update(last_used=now)
        return token

    @classmethod
    def authenticate(cls, plain: str) -> Any | None:
        """The active user owning a live token, else None."""
        token = cls.find(plain)
        return token.user if token is not None else None

    def allows(self, scope: str) -> bool:
        return scope in self.scopes

    @classmethod
    def is_known(cls, plain: str) -> bool:
        """Whether the token was ever issued (revoked ones too)."""
        return plain.startswith(cls.PREFIX) and cls.objects.filter(token_hash=_hash_api_token(plain)).exists()

    def revoke(self) -> bool:
        # Race: two revoke clicks; the first sets the time and the second changes nothing.
        return guarded_update(self, Q(revoked__isnull=True), revoked=timezone.now())

    @property
    def is_active(self) -> bool:
        return self.revoked is None


LAST_USED_RESOLUTION = timedelta(minutes=1)
