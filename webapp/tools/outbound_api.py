"""REST (personal API token): the outbound targets of the installation (docs/security.md#outbound).
Every signed-in caller lists them; a site administrator allows and removes them. The body is checked
by the page's form (webapp/tools/forms.py); a removed target stays listed with who removed it and when."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from webapp.accounts.access import require_site_admin
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import Page, PageParams, StrictSchema, form_error, paginate
from webapp.tools.access import get_target_for_admin
from webapp.tools.forms import OutboundTargetForm
from webapp.tools.outbound import OutboundTarget, floor_rules

router = Router(auth=UserTokenAuth(), tags=["outbound"])


class OutboundTargetOut(Schema):
    id: int
    rule: str = Field(description="host:port, a URL prefix, or network:port.")
    note: str
    allowed_by: str | None = Field(description="Username of the administrator who allowed it.")
    allowed_at: datetime
    removed_by: str | None
    removed_at: datetime | None = Field(description="None while the target is allowed.")

    @staticmethod
    def resolve_allowed_by(obj: OutboundTarget) -> str | None:
        return obj.allowed_by.username if obj.allowed_by else None

    @staticmethod
    def resolve_removed_by(obj: OutboundTarget) -> str | None:
        return obj.removed_by.username if obj.removed_by else None


class OutboundTargetIn(StrictSchema):
    rule: str = Field(min_length=1, max_length=300, description="host:port, a URL prefix, or network:port.")
    note: str = Field("", max_length=200, description="Why it is allowed, for the record.")


class TargetFilter(Schema):
    removed: bool = Field(False, description="List the removed targets (the audit trail) instead.")


class FloorOut(Schema):
    rules: list[str] = Field(description="STUDIO_TOOL_ALLOWLIST: the operator's rules, always allowed.")


@router.get("/outbound-targets", response=Page[OutboundTargetOut], summary="Outbound targets")
def targets(request: HttpRequest, paging: Query[PageParams], which: Query[TargetFilter]) -> dict[str, Any]:
    found = OutboundTarget.objects.select_related("allowed_by", "removed_by")
    return paginate(found.filter(removed_at__isnull=not which.removed).order_by("-id"), paging)


@router.get("/outbound-targets/floor", response=FloorOut, summary="The operator's outbound floor")
def floor(request: HttpRequest) -> dict[str, Any]:
    return {"rules": floor_rules()}


@router.post("/outbound-targets", response={201: OutboundTargetOut}, summary="Allow an outbound target")
def allow(request: HttpRequest, body: OutboundTargetIn) -> Any:
    """Site administrators only; counts from the next check on, in every process."""
    require_site_admin(request)
    form = OutboundTargetForm(body.dict())
    if not form.is_valid():
        raise form_error(form)
    data = form.cleaned_data
    return Status(201, OutboundTarget.allow(data["rule"], request.user, note=data["note"]))


@router.delete("/outbound-targets/{int:pk}", response={204: None}, summary="Remove an outbound target")
def remove(request: HttpRequest, pk: int) -> Any:
    """Site administrators only; the row stays, with who removed it and when."""
    get_target_for_admin(request, pk).remove(request.user)
    return Status(204, None)
