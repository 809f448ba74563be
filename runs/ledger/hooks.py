"""What apps above `runs` plug into a run, so `runs` never imports them (issue 24).

`recipes` registers its hooks in `RecipesConfig.ready()`: the engine calls the run-start hooks
once, when a run starts (before its first dispatch), and the run page asks the tab providers
for the context of tabs whose content another app owns (the Recipe tab). `compare` registers
a run-end hook in `CompareConfig.ready()`: the run finish calls the run-end hooks after the
run's terminal status is committed and its report stored (`runs.engine.finish.run_report_keep`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

from runs.models import TERMINAL_RUN_STATUSES, Run

__all__ = [
    "register_report_keeper",
    "report_keep",
    "report_keepers",
    "live_snapshot_keep",
    "live_snapshot_keepers",
    "register_live_snapshot_keeper",
    "register_run_end_backlog",
    "register_run_end_hook",
    "register_run_start_hook",
    "register_run_tab",
    "run_end",
    "run_end_backlog",
    "run_end_backlogs",
    "run_end_hooks",
    "run_start",
    "run_start_hooks",
    "run_tab_context",
    "run_tab_providers",
    "runs_ended_newest",
]

log = logging.getLogger(__name__)

# Called as hook(run_id=...) in the engine's database thread; each must be idempotent, since
# the engine calls them once per start and a start is the one moment a run's router config is
# the one its calls will meet.
run_start_hooks: list[Callable[..., Any]] = []
# Called as hook(run_id=...) once a run has ended (its terminal status committed, its report
# stored), each in its own transaction (a savepoint when the caller holds one). What a hook
# keeps must be derived from the ledger and recomputable on read: a hook that raises is logged
# and never changes the run. Each must be idempotent (a run end may be seen more than once).
run_end_hooks: list[Callable[..., Any]] = []
# Called as backlog(limit=..., exclude=...) by the workers' recovery pass: the ids of ended runs
# (at most `limit`, none of `exclude`, the newest first) that lack what the registering app's
# run-end hooks keep — runs that ended before a hook existed, or whose hook failed — so the
# pass calls the run-end hooks for them (`runs.engine.finish.runs_report_backfill`).
run_end_backlogs: list[Callable[..., list[int]]] = []
# Called as keeper(run_id=...) once a run has ended, before the run-end hooks: stores the run's
# report (`runs.reporting.stored_report.report_keep_settled`, registered by `RunsConfig.ready()`), so the
# engine never imports the report (issue 36 item 1).
report_keepers: list[Callable[..., Any]] = []
# Called as keeper(run_id=...) every few seconds on a driving worker's side database thread:
# what the run's pages read young (`runs.reporting.live_report.snapshot_keep`, registered by
# `RunsConfig.ready()`), so the engine never imports the live results (issue 36 item 1).
live_snapshot_keepers: list[Callable[..., Any]] = []
# tab name -> provider(request, run) -> the template context of that tab of the run page.
run_tab_providers: dict[str, Callable[[Any, Any], dict[str, Any]]] = {}


def register_run_start_hook(hook: Callable[..., Any]) -> None:
    """Add a hook called once when a run starts; registering the same hook again is a no-op
    (ready() may run more than once in tests)."""
    if hook not in run_start_hooks:
        run_start_hooks.append(hook)


def register_run_end_hook(hook: Callable[..., Any]) -> None:
    """Add a hook called once a run has ended; registering the same hook again is a no-op."""
    if hook not in run_end_hooks:
        run_end_hooks.append(hook)


def register_run_end_backlog(backlog: Callable[..., list[int]]) -> None:
    """Add an app's backlog of ended runs its run-end hooks have not kept; registering the same
    one again is a no-op."""
    if backlog not in run_end_backlogs:
        run_end_backlogs.append(backlog)


def run_end_backlog(*, limit: int, exclude: set[int]) -> list[int]:
    """Ended runs some registered backlog names, at most `limit`, in registration order."""
    found: list[int] = []
    for backlog in list(run_end_backlogs):
        for run_id in backlog(limit=limit, exclude=exclude):
            if run_id not in found and len(found) < limit:
                found.append(run_id)
    return found


def runs_ended_newest(*, limit: int, exclude: set[int], **filters: Any) -> list[int]:
    """Ended runs (terminal, finished) matching `filters`, none of `exclude`, the newest first,
    at most `limit`: the recovery pass's candidates, for the reports it keeps
    (`runs.engine.finish.runs_report_backfill`) and for an app's run-end backlog."""
    ended = Run.objects.filter(
        status__in=TERMINAL_RUN_STATUSES, finished_at__isnull=False, **filters
    ).exclude(pk__in=exclude)
    return list(ended.order_by("-finished_at", "-pk").values_list("pk", flat=True)[:limit])


def register_report_keeper(keeper: Callable[..., Any]) -> None:
    """Add the keeper of an ended run's report; registering the same one again is a no-op."""
    if keeper not in report_keepers:
        report_keepers.append(keeper)


def report_keep(*, run_id: int) -> None:
    """Every registered report keeper, in registration order (the caller logs a failure)."""
    for keeper in list(report_keepers):
        keeper(run_id=run_id)


def register_live_snapshot_keeper(keeper: Callable[..., Any]) -> None:
    """Add a keeper of a run's live figures; registering the same one again is a no-op."""
    if keeper not in live_snapshot_keepers:
        live_snapshot_keepers.append(keeper)


def live_snapshot_keep(*, run_id: int) -> None:
    """Every registered live-snapshot keeper, in registration order (the caller logs a
    failure: a page's figure is never the run's concern)."""
    for keeper in list(live_snapshot_keepers):
        keeper(run_id=run_id)


def register_run_tab(tab: str, provider: Callable[[Any, Any], dict[str, Any]]) -> None:
    run_tab_providers[tab] = provider


def run_start(*, run_id: int) -> None:
    """Every registered run-start hook, in registration order."""
    for hook in list(run_start_hooks):
        hook(run_id=run_id)


def run_end(*, run_id: int) -> None:
    """Every registered run-end hook, in registration order. A hook that raises is logged, what
    it wrote is rolled back, and the next one still runs: the run has ended whatever its hooks
    do."""
    for hook in list(run_end_hooks):
        try:
            with transaction.atomic():
                hook(run_id=run_id)
        except Exception:
            log.exception("run-end hook %s failed for run %s", _name(hook), run_id)


def _name(hook: Callable[..., Any]) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


def run_tab_context(tab: str, request: Any, run: Any) -> dict[str, Any]:
    """The context of a tab another app provides; empty when no app provides it."""
    provider = run_tab_providers.get(tab)
    return {} if provider is None else provider(request, run)
