"""Where team HTTP tools, remote rewards and alert webhooks may send requests (docs/security.md#outbound).

The rules are the operator's floor, STUDIO_TOOL_ALLOWLIST (always allowed; changed by a restart),
plus the outbound targets that site administrators allow in the product (:class:`OutboundTarget`, the
Outbound targets page and ``/api/outbound-targets``). They are global, not per team: a target is a
place on the installation's network, and any signed-in user can create a team and own it.

:func:`outbound_policy` reads them from the database at every check (one small indexed query), so a
target allowed or removed counts at once in the web server and in every worker; there is no
per-process cache that could disagree between them. The check itself is one module,
trainer/tools/allowlist.py, which the trainer applies again before every call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from trainer.tools.allowlist import AllowRule, NotAllowed, OutboundPolicy, OutboundRefused, check_url
from webapp.guarded import guarded_update

logger = logging.getLogger(__name__)
# The administrators a refusal names (more would only lengthen the message).
NAMED_ADMINS = 3


class OutboundTarget(models.Model):
    """One rule an administrator allowed; removing it keeps the row (who allowed and removed it, when)."""

    rule = models.CharField(max_length=300, help_text="host:port, a URL prefix, or network:port.")
    note = models.CharField(max_length=200, blank=True, help_text="Why it is allowed (for the audit).")
    allowed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    allowed_at = models.DateTimeField(default=timezone.now)
    removed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-allowed_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule"], condition=Q(removed_at__isnull=True), name="one_live_outbound_rule"
            )
        ]

    def __str__(self) -> str:
        return self.rule

    @property
    def is_live(self) -> bool:
        return self.removed_at is None

    @classmethod
    def allow(cls, text: str, user: Any, *, note: str = "") -> OutboundTarget:
        """Allow the rule ``text`` (ValueError says why it cannot be); an already live one is returned."""
        rule = str(parse_target(text))
        live = cls.objects.filter(rule=rule, removed_at__isnull=True)
        found = live.first()
        if found is not None:
            return found
        try:
            # Race: two administrators allowing the same target at once; the partial unique
            # constraint keeps one live row, and the second gets that one.
            with transaction.atomic():
                return cls.objects.create(rule=rule, note=note, allowed_by=user)
        except IntegrityError:
            return live.get()

    def remove(self, user: Any) -> bool:
        """Take the target off (from the next check on); True when this call removed it."""
        # Race: two administrators removing it at once; the first is recorded as the one who did.
        return guarded_update(self, Q(removed_at__isnull=True), removed_at=timezone.now(), removed_by=user)


def parse_target(text: str) -> AllowRule:
    """A rule an administrator may allow; ValueError says what is wrong with ``text``."""
    rule = AllowRule.parse(text)
    network = rule.network
    if network is not None and (network.is_private or network.is_link_local or network.is_loopback):
        raise ValueError(
            f"{text.strip()!r}: a network rule never reaches private, loopback or link-local addresses; "
            "allow each exact host and port instead (10.0.0.5:8080)"
        )
    conflicts = OutboundPolicy((rule,), tuple(settings.SERVICE_ENDPOINTS)).conflicts()
    if conflicts:
        raise ValueError(f"{text.strip()!r}: {conflicts[0]}, which no rule may open")
    return rule


def floor_rules() -> list[str]:
    """STUDIO_TOOL_ALLOWLIST: the operator's rules, always allowed."""
    return [str(AllowRule.parse(text)) for text in settings.TOOL_ALLOWLIST if text.strip()]


def outbound_policy() -> OutboundPolicy:
    """The floor and the live targets, with the product's own services closed (docs/security.md#outbound)."""
    rules = [AllowRule.parse(text) for text in settings.TOOL_ALLOWLIST if text.strip()]
    for text in OutboundTarget.objects.filter(removed_at__isnull=True).values_list("rule", flat=True):
        try:
            rules.append(AllowRule.parse(text))
        except ValueError:
            logger.warning("outbound target %r is no longer a valid rule; it is ignored", text)
    return OutboundPolicy(tuple(rules), tuple(settings.SERVICE_ENDPOINTS))


@dataclass(frozen=True)
class Refusal:
    """Why a URL may not be called; ``target``: the ``host:port`` an administrator could allow for it."""

    message: str
    target: str | None = None


def refusal_of(url: str) -> Refusal | None:
    """Why a member's request may not go to ``url`` (None: the rules allow it; the address it
    resolves to is checked per call). A refusal for want of a rule says who can allow it."""
    try:
        check_url(url, outbound_policy())
    except NotAllowed as refused:
        return Refusal(f"{refused}; {who_can_allow(refused.target)}", refused.target)
    except OutboundRefused as refused:
        return Refusal(str(refused))
    return None


def url_refusal(url: str) -> str | None:
    """:func:`refusal_of`'s message (None: allowed)."""
    refusal = refusal_of(url)
    return None if refusal is None else refusal.message


def who_can_allow(target: str) -> str:
    """The sentence that tells a member who can allow ``target``, and where."""
    admins = get_user_model().objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True)
    names = list(admins.order_by("username").values_list("username", flat=True)[: NAMED_ADMINS + 1])
    shown = ", ".join(names[:NAMED_ADMINS]) + (", …" if len(names) > NAMED_ADMINS else "")
    who = f"a site administrator ({shown})" if names else "a site administrator (a staff user)"
    return f"{who} can allow {target} on the Outbound targets page ({reverse('outbound_targets')})"
