"""Pre-registered non-inferiority margins (issue 21 point 4, R5.5): a plan field frozen into the
manifest and its hash; the parity verdict only on holdout runs, only against the margin frozen
in the candidate run's plan; a margin given at comparison time that differs is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from compare.services import comparison_build
from runs.planning.plans import plan_freeze
from tests import factories as f
from tests.cli.conftest import bench  # noqa: F401  (the CLI fixture)
from tests.compare import builders as b
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

N = 400
ALPHA = 0.05


@pytest.fixture
def plan():  # type: ignore[no-untyped-def]
    f.target_create(
        slug="margin-t", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    dataset = es.fixture_dataset(["arc"])
    return {"name": "margins", "dataset": dataset.pk, "targets": ["margin-t"]}


@pytest.fixture
def api():  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(f.user_create())
    return client


def hoeffding_lower(base: list[bool], cand: list[bool]) -> float:
    """Independent of product code: one benchmark, per-question differences in [−1, 1], so the
    two-sided Hoeffding half-width is sqrt((b − a)² · ln(2/α) / (2n)) with b − a = 2."""
    n = len(base)
    delta = sum(int(c) - int(x) for x, c in zip(base, cand, strict=True)) / n
    return delta - math.sqrt(4 * math.log(2 / ALPHA) / (2 * n))


def parity_run(split: str, margin: str | None, losses: int = 0):  # type: ignore[no-untyped-def]
    """One run holding a baseline and a router over N mmlu-pro questions; the router loses
    ``losses`` questions the baseline answers."""
    qs = b.questions({"mmlu-pro": N})
    tag = next(b._seq)
    base, cand = b.target(f"base-m{tag}"), b.target(f"cand-m{tag}", kind="mom")
    base_out = [True] * (N // 2) + [False] * (N - N // 2)
    cand_out = [False] * losses + base_out[losses:]
    extra = {} if margin is None else {"non_inferiority_margin": margin}
    run = b.run(qs, {base: base_out, cand: cand_out}, split=split, **extra)
    return run, hoeffding_lower(base_out, cand_out)


def verdict_of(run_id: int) -> dict:  # type: ignore[type-arg]
    (c,) = comparison_build(baseline_run_id=run_id, candidate_run_ids=[run_id])["comparisons"]
    return c["non_inferiority"]


# --- the plan field ----------------------------------------------------------------------------


def test_margin_is_frozen_into_the_manifest_and_changes_the_hash(plan) -> None:  # type: ignore[no-untyped-def]
    without = plan_freeze(data=plan)
    with_margin = plan_freeze(data={**plan, "non_inferiority_margin": 0.3})
    other = plan_freeze(data={**plan, "non_inferiority_margin": "0.05"})
    assert "non_inferiority_margin" not in without.manifest
    assert with_margin.manifest["non_inferiority_margin"] == "0.3"
    assert len({without.plan_sha256, with_margin.plan_sha256, other.plan_sha256}) == 3
    # The same decimal written another way is the same plan.
    same = plan_freeze(data={**plan, "non_inferiority_margin": "0.3000"})
    assert same.plan_sha256 == with_margin.plan_sha256


def test_plan_review_api_freezes_the_margin(api, plan) -> None:  # type: ignore[no-untyped-def]
    r = api.post("/api/v1/plans/review/", {**plan, "non_inferiority_margin": 0.3}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    manifest = body.get("manifest", body)
    assert manifest["non_inferiority_margin"] == "0.3"


@pytest.mark.parametrize("bad", [0, "0", 1, "1.0", -0.1, 1.5, "0.00001", "abc", True, "NaN"])
def test_invalid_margin_is_a_400_naming_the_field(api, plan, bad) -> None:  # type: ignore[no-untyped-def]
    r = api.post("/api/v1/plans/review/", {**plan, "non_inferiority_margin": bad}, format="json")
    assert r.status_code == 400, r.content
    assert "non_inferiority_margin" in json.dumps(r.json())


# --- the verdict -------------------------------------------------------------------------------


def test_holdout_margin_gives_non_inferior_when_the_lower_bound_clears_minus_margin() -> None:
    run, lower = parity_run("holdout", "0.19", losses=20)  # Δ = −0.05, lower ≈ −0.186
    ni = verdict_of(run.pk)
    assert ni["lower_bound"] == pytest.approx(lower, abs=1e-9)
    assert lower > -0.19
    assert ni["verdict"] == "non-inferior"
    assert ni["margin_exact"] == "0.19" and ni["margin_run"] == run.pk
    assert ni["margin_plan_sha256"] == run.plan_sha256
    assert ni["interval"]["method"] == "weighted Hoeffding"
    assert ni["interval"]["level"] == pytest.approx(0.95)
    assert "0.19" in ni["reason"] and "weighted Hoeffding" in ni["reason"]


def test_holdout_margin_gives_not_shown_when_the_lower_bound_does_not_clear() -> None:
    run, lower = parity_run("holdout", "0.18", losses=20)
    ni = verdict_of(run.pk)
    assert ni["lower_bound"] == pytest.approx(lower, abs=1e-9)
    assert lower <= -0.18
    assert ni["verdict"] == "not shown"
    assert "is not above −0.18" in ni["reason"]


def test_dev_split_gives_no_verdict_whatever_the_margin() -> None:
    run, _ = parity_run("dev", "0.5")
    ni = verdict_of(run.pk)
    assert ni["verdict"] == "not shown" and "holdout" in ni["reason"]


def test_without_a_frozen_margin_there_is_no_verdict() -> None:
    run, _ = parity_run("holdout", None)
    ni = verdict_of(run.pk)
    assert ni["verdict"] == "not shown" and "no non-inferiority margin" in ni["reason"]


def test_the_candidate_runs_margin_governs_and_the_baselines_must_agree_or_be_absent() -> None:
    qs = b.questions({"mmlu-pro": N})
    out = [True] * (N // 2) + [False] * (N - N // 2)
    base, router = b.target("base-gov"), b.target("router-gov", kind="mom")
    cand = b.run(qs, {router: out}, split="holdout", non_inferiority_margin="0.2")
    silent_base = b.run(qs, {base: out}, split="holdout")
    other_base = b.run(qs, {base: out}, split="holdout", non_inferiority_margin="0.1")

    doc = comparison_build(baseline_run_id=silent_base.pk, candidate_run_ids=[cand.pk])
    (c,) = doc["comparisons"]
    assert c["non_inferiority"]["verdict"] == "non-inferior"
    assert c["non_inferiority"]["margin_run"] == cand.pk
    assert doc["non_inferiority_margin"] == pytest.approx(0.2)

    (c,) = comparison_build(baseline_run_id=other_base.pk, candidate_run_ids=[cand.pk])[
        "comparisons"
    ]
    assert c["non_inferiority"]["verdict"] == "not shown"
    assert "disagree" in c["non_inferiority"]["reason"]


# --- a margin at comparison time -----------------------------------------------------------------


def test_a_different_margin_at_comparison_time_is_refused(api) -> None:  # type: ignore[no-untyped-def]
    run, _ = parity_run("holdout", "0.2")
    url = f"/api/v1/comparisons/?baseline={run.pk}&candidate={run.pk}"
    r = api.get(url + "&non_inferiority_margin=0.3")
    assert r.status_code == 409 and r.json()["code"] == "margin_frozen"
    assert "froze 0.2" in r.json()["error"] and "0.3" in r.json()["error"]

    body = {"baseline": run.pk, "candidates": [run.pk], "non_inferiority_margin": "0.3"}
    r = api.post("/api/v1/compare/", body, format="json")
    assert r.status_code == 409 and r.json()["code"] == "margin_frozen"

    r = api.get(
        f"/api/v1/compare/export.json?baseline={run.pk}&candidates={run.pk}"
        "&non_inferiority_margin=0.3"
    )
    assert r.status_code == 409

    # Restating the frozen margin is only a check, and passes.
    r = api.get(url + "&non_inferiority_margin=0.20")
    assert r.status_code == 200
    assert r.json()["comparisons"][0]["non_inferiority"]["verdict"] == "non-inferior"
    r = api.get(url + "&non_inferiority_margin=2")
    assert r.status_code == 400


def test_a_margin_at_comparison_time_cannot_add_one_that_was_not_frozen(api) -> None:  # type: ignore[no-untyped-def]
    run, _ = parity_run("holdout", None)
    body = {"baseline": run.pk, "candidates": [run.pk], "non_inferiority_margin": "0.2"}
    r = api.post("/api/v1/compare/", body, format="json")
    assert r.status_code == 409 and "froze no margin" in r.json()["error"]


# --- CLI and form --------------------------------------------------------------------------------


def test_cli_flag_reaches_the_manifest(bench, plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    out = tmp_path / "manifest.json"
    args = ["--dataset", str(plan["dataset"]), "--target", "margin-t"]
    r = bench("plan", *args, "--non-inferiority-margin", "0.05", "--output", str(out))
    assert r.code == 0, r.err
    assert json.loads(out.read_text())["non_inferiority_margin"] == "0.05"
    r = bench("plan", *args, "--non-inferiority-margin", "1.5")
    assert r.code != 0 and "non_inferiority_margin" in r.err + r.out


def test_form_field_reaches_the_manifest(client) -> None:  # type: ignore[no-untyped-def]
    from datasets.services import source_prepare
    from runs.models import Run

    client.force_login(f.user_create())
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", model="sim-strong")
    page = client.get("/runs/new/?profile=smoke").content.decode()
    assert 'name="non_inferiority_margin"' in page
    form = {
        "profile": "smoke",
        "seed": "20260918",
        "name": "with a margin",
        "benchmarks": ["mmlu-pro"],
        "targets": ["sim-strong"],
        "total_timeout_s": "300",
        "idle_timeout_s": "60",
        "max_output_tokens": "1024",
        "max_output_chars": "200000",
        "concurrency": "2",
        "max_calls_per_case": "4",
        "case_timeout_s": "900",
        "max_run_seconds": "86400",
        "failure_policy": "stop",
        "slots": "1",
        "non_inferiority_margin": "0.05",
        "action": "review",
    }
    html = client.post("/runs/new/", form).content.decode()
    assert 'id="plan-margin">0.05' in html, html[:3000]
    key = html.split('name="idempotency_key" value="')[1].split('"')[0]
    plan_hash = html.split('<code id="plan-hash">')[1].split("<")[0]
    start = {**form, "action": "start", "idempotency_key": key, "reviewed_plan_sha256": plan_hash}
    assert client.post("/runs/new/", start).status_code == 303
    assert Run.objects.get().manifest["non_inferiority_margin"] == "0.05"

    bad = client.post("/runs/new/", {**form, "non_inferiority_margin": "1"}).content.decode()
    assert "strictly between 0 and 1" in bad
    assert Run.objects.count() == 1
