"""Who may act on a run: the one rule every surface asks (issue 19, docs/reliability.md).

Reading — runs, reports, results, calls, events, lineage, recovery plans, comparisons — is for
every signed-in member: this is a team portal. Acting on a run — cancelling it, submitting a
recovery (which spends money), reconciling its usage, re-grading it, exporting its answer
matrix — is for the run's owner and for operators (staff). Targets are registered by
operators in the admin only; the API has no write for them.

The REST API (and through it the CLI, in process or over HTTP) uses ``MayActOnRun``; the
pages use ``run_action_require``. Both are checked before the service is called, so a refusal
writes no row, appends no event and sends no model call.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

from runs.models import Run

# What each write action is called in a refusal ("… may cancel run #7").
RUN_ACTIONS = {
    "cancel": "cancel",
    "recover": "submit a recovery of",
    "reconcile_usage": "reconcile the usage of",
    "regrade": "re-grade",
    "export": "export",
}


def user_is_operator(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)


def may_act_on_run(user: Any, run: Run) -> bool:
    """True for the run's owner and for operators; False for anyone else, anonymous included."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    return user_is_operator(user) or run.owner_id == user.pk


def run_action_refusal(run: Run, action: str) -> str:
    """The refusal in words, for the API's error and the page's message."""
    verb = RUN_ACTIONS.get(action, action)
    return f"Only the owner of run #{run.pk} or an operator may {verb} it; nothing was changed."


def run_action_require(*, user: Any, run: Run, action: str) -> None:
    """For pages: raise PermissionDenied (a 403 page with the reason) unless `user` may act."""
    if not may_act_on_run(user, run):
        raise PermissionDenied(run_action_refusal(run, action))


class MayActOnRun(BasePermission):
    """DRF object permission for the write actions on a run: refused as 403
    ``{"error": <reason>, "code": "not_run_owner", "detail": null}``.

    The action is the viewset's ``action`` or the view's ``run_action`` attribute."""

    code = "not_run_owner"
    message = "Only the run's owner or an operator may do this; nothing was changed."

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        if not isinstance(obj, Run):
            return False  # fail closed: this permission only knows runs
        if may_act_on_run(request.user, obj):
            return True
        action = getattr(view, "run_action", None) or getattr(view, "action", None) or ""
        # DRF builds the PermissionDenied from this instance's message: a fresh instance per
        # request, so naming the run here is safe.
        self.message = run_action_refusal(obj, action)
        return False
