"""The one correction-append rule (issue 24; R2 append-only corrections): versions count up
from 1 per run, the same input is the same version, concurrent appends to one run never
collide, and the rule refuses to run outside the caller's transaction."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import close_old_connections, transaction

from runs.ledger.corrections import version_append
from runs.models import UsageCorrection
from tests import factories as f


def _fields(n: int) -> dict[str, object]:
    return {
        "verified_count": n,
        "changed_count": 0,
        "unverifiable_count": 0,
        "old_known_cost_usd": Decimal("0.1"),
        "new_known_cost_usd": None,
        "corrections": {"n": n},
    }


def _append(run_id: int, sha: str, n: int) -> tuple[UsageCorrection, bool]:
    with transaction.atomic():
        return version_append(
            UsageCorrection, run_id=run_id, key={"evidence_sha256": sha}, fields=_fields(n)
        )


@pytest.mark.django_db
def test_versions_count_up_and_the_same_input_is_the_same_version() -> None:
    run, other = f.run_create(), f.run_create()
    first, created_first = _append(run.pk, "a" * 64, 1)
    second, created_second = _append(run.pk, "b" * 64, 2)
    again, created_again = _append(run.pk, "a" * 64, 3)
    elsewhere, _ = _append(other.pk, "a" * 64, 4)
    assert (first.version, created_first) == (1, True)
    assert (second.version, created_second) == (2, True)
    assert (again.pk, again.version, created_again) == (first.pk, 1, False)
    assert again.verified_count == 1  # the first reading stands; nothing was rewritten
    assert elsewhere.version == 1  # versions are per run
    assert again.new_known_cost_usd is None  # unknown stays unknown


@pytest.mark.django_db(transaction=True)  # no test transaction around it
def test_the_rule_refuses_to_run_outside_a_transaction() -> None:
    run = f.run_create()
    with pytest.raises(RuntimeError, match="inside the caller's transaction"):
        version_append(
            UsageCorrection, run_id=run.pk, key={"evidence_sha256": "c" * 64}, fields=_fields(1)
        )
    assert not UsageCorrection.objects.filter(run=run).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_to_one_run_take_distinct_versions() -> None:
    """Eight threads, each its own PostgreSQL connection, append eight different inputs at
    once; the run row lock makes them take versions 1..8 with no unique-constraint error."""
    run = f.run_create()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            start.wait(timeout=60)
            _append(run.pk, f"{n:064x}", n)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    versions = sorted(UsageCorrection.objects.filter(run=run).values_list("version", flat=True))
    assert versions == list(range(1, 9))
