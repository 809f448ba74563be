"""Real calls independently confirm the router config (R12.3): counts of acknowledged,
mismatched and missing `x-vsr-config-hash` per run and target."""

from __future__ import annotations

import pytest

from recipes.selectors import recipe_confirmations
from tests import factories as f

pytestmark = pytest.mark.django_db

PIN = "a" * 64
OTHER = "b" * 64


def mom(**fields):
    return f.target_create(
        kind="mom",
        model="auto",
        config_hash=PIN,
        prices={"m": {"input": "1", "output": "1"}},
        **fields,
    )


def calls(run, target, acks):
    for ack in acks:
        cell = f.cell_create(run=run, target=target)
        f.call_create(cell=cell, config_hash_ack=ack)


def test_counts_confirmed_mismatched_and_missing_acknowledgements_of_the_pinned_hash():
    target = mom()
    run = f.run_create(manifest={"targets": [{"slug": target.slug, "config_hash": PIN}]})
    calls(run, target, [PIN, PIN, PIN, OTHER, ""])

    assert recipe_confirmations(run=run, target=target) == {
        "calls": 5,
        "confirmed": 3,
        "mismatched": 1,
        "missing": 1,
    }


def test_only_this_runs_calls_to_this_target_count():
    target, other_target = mom(), mom()
    run, other_run = f.run_create(), f.run_create()
    calls(run, target, [PIN])
    calls(run, other_target, [PIN, PIN])
    calls(other_run, target, [OTHER])

    assert recipe_confirmations(run=run, target=target)["calls"] == 1


def test_the_runs_frozen_pin_counts_not_the_targets_later_one():
    target = mom()
    run = f.run_create(manifest={"targets": [{"slug": target.slug, "config_hash": OTHER}]})
    calls(run, target, [OTHER, OTHER, PIN])

    counts = recipe_confirmations(run=run, target=target)

    assert (counts["confirmed"], counts["mismatched"]) == (2, 1)


def test_without_a_pin_confirmation_is_unknown_not_zero():
    target = mom()
    run = f.run_create(manifest={"targets": [{"slug": target.slug, "config_hash": None}]})
    calls(run, target, [PIN, ""])

    assert recipe_confirmations(run=run, target=target) == {
        "calls": 2,
        "confirmed": None,
        "mismatched": None,
        "missing": 1,
    }
