"""A run's planned cases packed for comparisons (compare/plan_cases.py, issue 38 item 5): the
digest is the case *set*, the packed columns are the manifest's cases, and a comparison reads
them instead of the manifest's megabytes of case list."""

from __future__ import annotations

import pytest

from compare.models import PlanCases
from compare.plan_cases import case_set_digest, plan_cases, planned_cases
from runs.models import Run
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

CASES = [[7, "a" * 64, "gpqa"], [3, "b" * 64, "mmlu-pro"], [5, "c" * 64, "gpqa"]]


def test_the_digest_is_the_set_of_cases() -> None:
    digest = case_set_digest(CASES)
    assert case_set_digest(list(reversed(CASES))) == digest  # a plan's order is not measured
    assert case_set_digest([*CASES, CASES[0]]) == digest  # nor is a repeat (a set)
    assert case_set_digest([tuple(c) for c in CASES]) == digest
    changed = [CASES[0], CASES[1], [5, "d" * 64, "gpqa"]]  # one content hash
    moved = [CASES[0], CASES[1], [5, "c" * 64, "mmlu-pro"]]  # one benchmark
    assert len({digest, case_set_digest(changed), case_set_digest(moved)}) == 3


def test_the_packed_cases_are_the_manifests() -> None:
    qs = b.questions({"mmlu-pro": 3, "gpqa": 2})
    run = b.run(qs, {b.target("one"): [True, False, True, True, False]})
    manifest = Run.objects.get(pk=run.pk).manifest
    (kept,) = plan_cases([Run.objects.defer("manifest").get(pk=run.pk)]).values()
    assert (
        PlanCases.objects.get(run=run).digest == kept.digest == case_set_digest(manifest["cases"])
    )
    order = list(manifest["benchmarks"])
    questions, benchmarks = planned_cases(PlanCases.objects.get(run=run), order)
    assert questions.tolist() == [c[0] for c in manifest["cases"]]
    assert [order[i] for i in benchmarks.tolist()] == [c[2] for c in manifest["cases"]]
    # A benchmark the manifest does not list is an error, as reading the list would be.
    with pytest.raises(KeyError):
        planned_cases(kept, [o for o in order if o != "gpqa"])


def test_the_kept_head_is_the_manifest_without_its_cases_and_is_what_a_comparison_reads():
    from compare.services import comparison_build
    from srbench.refusals import Refusal

    qs = b.questions({"mmlu-pro": 3})
    baseline_run = b.run(qs, {b.target("base"): [True, False, True]})
    other = b.run(qs, {b.target("cand"): [True, True, False]})
    doc = comparison_build(baseline_run_id=baseline_run.pk, candidate_run_ids=[other.pk])
    assert [c["run"] for c in doc["comparisons"]] == [other.pk]
    manifest = Run.objects.get(pk=other.pk).manifest
    row = PlanCases.objects.get(run=other)
    assert row.head == {k: v for k, v in manifest.items() if k != "cases"}
    # The comparison reads the kept head, not the manifest: a head changed by hand (a limit
    # that changes what is asked) is what it checks, and it refuses the pair.
    row.head = {**row.head, "limits": {**row.head["limits"], "max_output_tokens": 7}}
    row.save()
    with pytest.raises(Refusal, match="max_output_tokens"):
        comparison_build(baseline_run_id=baseline_run.pk, candidate_run_ids=[other.pk])


def test_the_kept_offer_fingerprint_is_the_computed_one_and_is_what_the_offer_reads():
    from compare import selectors
    from compare.plan_cases import offer_fingerprint

    qs = b.questions({"mmlu-pro": 3})
    first = b.run(qs, {b.target("base"): [True, False, True]})
    second = b.run(qs, {b.target("cand"): [True, True, False]})
    plan_cases(list(Run.objects.defer("manifest").filter(pk__in=[first.pk, second.pk])))
    computed = dict(
        Run.objects.filter(pk__in=[first.pk, second.pk])
        .annotate(fp=offer_fingerprint())
        .values_list("pk", "fp")
    )
    kept = dict(PlanCases.objects.values_list("run_id", "fingerprint"))
    assert kept == computed and computed[first.pk] == computed[second.pk]
    selectors._FROZEN.clear()
    pool = selectors.comparable_pool()
    assert pool[first.pk].fingerprint == computed[first.pk]
    assert [o.id for o in selectors.candidate_options(first.pk, pool=pool)] == [second.pk]
    # Step 2 finds the group by the kept fingerprints (both runs packed) as step 1 does.
    assert set(selectors.comparable_pool(first.pk)) == {first.pk, second.pk}
    # Read from the row, not computed again: a row changed by hand moves the run to another
    # group, and the page offers the other run no more.
    PlanCases.objects.filter(run=second).update(fingerprint="0" * 32)
    selectors._FROZEN.clear()
    pool = selectors.comparable_pool()
    assert pool[second.pk].fingerprint == "0" * 32
    assert [o.id for o in selectors.candidate_options(first.pk, pool=pool)] == []
    selectors._FROZEN.clear()
    assert set(selectors.comparable_pool(first.pk)) == {first.pk}
    assert selectors.candidate_options(first.pk) == []
    selectors._FROZEN.clear()


def test_a_group_of_packed_and_unpacked_runs_is_found_whole():
    from compare import selectors

    qs = b.questions({"mmlu-pro": 3})
    first = b.run(qs, {b.target("base"): [True, False, True]})
    second = b.run(qs, {b.target("cand"): [True, True, False]})
    plan_cases(list(Run.objects.defer("manifest").filter(pk=first.pk)))  # only the first
    assert not PlanCases.objects.filter(run=second).exists()
    selectors._FROZEN.clear()
    assert set(selectors.comparable_pool(first.pk)) == {first.pk, second.pk}
    assert set(selectors.comparable_pool(second.pk)) == {first.pk, second.pk}
    selectors._FROZEN.clear()
