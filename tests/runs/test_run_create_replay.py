"""A run-creation request resent with its idempotency key is answered by the run it made, even
when the server would freeze the plan differently now (fourth outside probe item 3; R7
idempotent creation; docs/decisions.md "jc: a resent run creation"). A target check finished
between the first request and its resend names itself in the plan's target snapshot
(`stream_usage_checked`), so a fresh freeze has a new hash; the resend was refused as "a
different plan" (422) though the client sent the same bytes. The key compares what the client
sent; the run keeps the plan frozen when it was made (never re-frozen for an in-flight run)."""

from __future__ import annotations

import re

import pytest

from datasets.services import source_prepare
from runs.ledger.accounting import STREAM_USAGE_CHECKED_KEY
from runs.models import Run
from runs.models.preflight import TargetPreflight
from runs.planning.plans import plan_freeze
from tests import factories as f
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

OK = {"key": "stream_usage", "verdict": "ok", "observed": "", "effect": ""}


@pytest.fixture
def sent(client):
    client.force_login(f.user_create())
    target = f.target_create(slug="rp", model="rp", prices={"rp": {"input": "1", "output": "2"}})
    dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=1)
    return target, {"name": "replay", "dataset": dataset.pk, "targets": ["rp"]}


def post(client, plan, key="k-replay"):
    return client.post(
        "/api/v1/runs/", plan, content_type="application/json", headers={"Idempotency-Key": key}
    )


def check(target) -> TargetPreflight:
    return TargetPreflight.objects.create(
        target=target,
        status="completed",
        base_url=target.base_url,
        model=target.model,
        planned_calls=9,
        stream_usage=True,
        findings=[OK],
    )


def test_a_resend_after_a_new_target_check_replays_the_run_with_its_own_frozen_plan(client, sent):
    target, plan = sent
    first = post(client, plan)
    assert first.status_code == 201, first.json()
    run = Run.objects.get(pk=first.json()["id"])
    frozen_sha, frozen_target = run.plan_sha256, run.manifest["targets"][0]
    assert STREAM_USAGE_CHECKED_KEY not in frozen_target

    made = check(target)  # a check finishes while the client's response is lost
    assert plan_freeze(data=plan).plan_sha256 != frozen_sha  # a fresh freeze differs now

    again = post(client, plan)

    assert again.status_code == 200, again.json()
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == run.pk and Run.objects.count() == 1
    run.refresh_from_db()
    # The run keeps the plan it was frozen with: the check does not change it in flight.
    assert run.plan_sha256 == frozen_sha and run.manifest["targets"][0] == frozen_target
    # A new request (a new key) freezes the plan as it is now, the check named.
    fresh = post(client, plan, key="k-new")
    assert fresh.status_code == 201
    snapshot = Run.objects.get(pk=fresh.json()["id"]).manifest["targets"][0]
    assert snapshot[STREAM_USAGE_CHECKED_KEY] == f"target check #{made.pk}"


def test_the_same_key_with_another_request_is_still_refused(client, sent):
    _target, plan = sent
    assert post(client, plan).status_code == 201
    other = post(client, {**plan, "name": "other"})
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    # The same plan with a key sent in the body instead of the header is the same request.
    body = client.post(
        "/api/v1/runs/",
        {**plan, "idempotency_key": "k-replay"},
        content_type="application/json",
    )
    assert body.status_code == 200 and body["Idempotent-Replayed"] == "true"
    assert Run.objects.count() == 1


def test_a_run_made_before_the_request_hash_is_still_compared_by_its_frozen_plan(client, sent):
    """A run created before runs/0024 holds no request hash: its resend is compared, as
    before, by freezing the plan again."""
    target, plan = sent
    run_id = post(client, plan).json()["id"]
    Run.objects.filter(pk=run_id).update(request_sha256="")
    assert post(client, plan).status_code == 200  # the plan freezes the same
    check(target)
    assert post(client, plan).status_code == 422  # the old rule: a fresh freeze differs


def test_a_resubmitted_start_after_a_new_target_check_finds_its_run_on_the_create_page(client):
    """The Create page's Start carries the review's key: resubmitted after a check finished,
    it is the same request and finds the run it started, rather than "the plan changed since
    it was reviewed" (which would have the user start a second run)."""
    client.force_login(f.user_create())
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    target = f.target_create(slug="rp-page", model="rp-page")
    form = {
        "profile": "smoke",
        "seed": "20260918",
        "name": "resubmitted",
        "benchmarks": ["mmlu-pro"],
        "targets": ["rp-page"],
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
        "action": "review",
    }
    html = client.post("/runs/new/", form).content.decode()
    key = re.search(r'name="idempotency_key" value="([0-9a-f]+)"', html).group(1)
    plan_hash = re.search(r'<code id="plan-hash">([0-9a-f]{64})</code>', html).group(1)
    start = {**form, "action": "start", "idempotency_key": key, "reviewed_plan_sha256": plan_hash}
    first = client.post("/runs/new/", start)
    assert first.status_code == 303

    check(target)
    second = client.post("/runs/new/", start, follow=True)

    assert second.redirect_chain and second.redirect_chain[0][0] == first["Location"]
    assert "already started from this review" in second.content.decode()
    assert Run.objects.count() == 1 and Run.objects.get().plan_sha256 == plan_hash
    # A plan that changed before its first Start is still sent back to be reviewed again.
    fresh = client.post("/runs/new/", {**start, "idempotency_key": "f" * 32})
    assert fresh.status_code == 200 and "The plan changed since it was reviewed" in (
        fresh.content.decode()
    )
    assert Run.objects.count() == 1
