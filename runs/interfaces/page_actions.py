"""What a run page offers to do with the run (issue 35 item 7): export its answer matrix,
compare it, and the CLI commands that read it — each one that works, or the reason it does not.

Export is the API's (`/api/v1/runs/<id>/export/`, runs.reporting.export): offered for what
`export_matrix` accepts (a completed live dev-split run), to whom the API lets export (the
owner or an operator); otherwise the page says why. Compare is the Compare page with this run
preselected: as the baseline when it has a single-model target (and as its own candidate when
it holds other targets too); a run with routers only is a candidate, chosen after a baseline.
The CLI lines are `manage.py benchmark` verbs (`runs.interfaces.cli`, `compare.cli`) with their real
arguments, and the `srbench` console script's remote form.
"""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlencode

from django.db.models import F
from django.http import HttpRequest
from django.urls import reverse

from runs.ledger import selectors
from runs.ledger.permissions import may_act_on_run
from runs.models import Run, RunStatus

__all__ = ["run_actions"]


def _split(run: Run) -> str:
    """The run's split as the export reads it: the frozen plan's, else the dataset's."""
    frozen, dataset = Run.objects.filter(pk=run.pk).values_list(
        F("manifest__dataset__split"), "dataset__split"
    )[0]
    return frozen or dataset


def export_refusal(run: Run, user: Any) -> str | None:
    """Why this user cannot export this run now (the API's 409/403 in words), or None."""
    if run.mode != Run.Mode.LIVE:
        return f"a {run.mode} run has no answers to export."
    if run.status != RunStatus.COMPLETED:
        return f"only a completed run can be exported; this run is {run.status}."
    split = _split(run)
    if split != "dev":
        return (
            f"this run uses the {split} split: standard (holdout) questions must not be used "
            "for tuning, so only dev-split runs are exported."
        )
    if not may_act_on_run(user, run):
        return "only the run's owner or an operator may export it."
    return None


def _compare(run: Run) -> dict[str, Any]:
    if run.mode != Run.Mode.LIVE or not run.is_terminal or run.parent_id:
        return {
            "url": None,
            "why": "Compare takes ended live runs that are not recovery or re-judge runs.",
        }
    targets = selectors.manifest_head(run)["targets"] or []
    base = reverse("compare:index")
    if any(t.get("kind") == "single" for t in targets):
        query: dict[str, Any] = {"baseline": run.pk}
        if len(targets) > 1:
            query["candidates"] = run.pk  # its other targets against its strongest model
        return {"url": f"{base}?{urlencode(query)}", "why": None, "as": "baseline"}
    return {
        "url": base,
        "why": f"run #{run.pk} has routers only: choose a baseline run with a single model; "
        f"run #{run.pk} is then offered among its candidates.",
        "as": "candidate",
    }


def _cli(request: HttpRequest, run: Run, exportable: bool) -> list[tuple[str, str]]:
    user = shlex.quote(request.user.get_username() or "USER")
    local = f"python manage.py benchmark {{}} {run.pk} {{}}--user {user}"
    lines = [
        ("The run report", local.format("report", "")),
        ("Its question results", local.format("show", "--results ")),
    ]
    if exportable:
        lines.append(
            (
                "Its answer matrix",
                local.format("export", f"--format csv --output run-{run.pk}.csv "),
            )
        )
    site = shlex.quote(request.build_absolute_uri("/").rstrip("/"))
    lines.append(
        (
            "From another machine (an API token in SRBENCH_TOKEN)",
            f"srbench report {run.pk} --url {site}",
        )
    )
    return lines


def run_actions(request: HttpRequest, run: Run) -> dict[str, Any]:
    """Export links (or why not), the Compare link and the CLI commands of this run."""
    refusal = export_refusal(run, request.user)
    api = reverse("run-export", args=[run.pk])
    return {
        "export": {
            "csv": f"{api}?as=csv",
            "json": f"{api}?as=json",
            "refusal": refusal,
        },
        "compare": _compare(run),
        "cli": _cli(request, run, refusal is None),
    }
