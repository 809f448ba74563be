"""The runs API: plan review without model calls, idempotent creation, cursor pages, events
without totals, cancel (issue 5 point 9, issue 7 conventions)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from runs.models import Call, Run, RunEvent
from tests import factories as f
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client):
    user = f.user_create()
    client.force_login(user)
    return user


@pytest.fixture
def plan():
    targets = {
        "strong": f.target_create(
            slug="sim-strong", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
        ),
    }
    dataset = es.fixture_dataset(["mmlu-pro", "arc"])
    return {"name": "api", "dataset": dataset.pk, "targets": [targets["strong"].slug]}


def test_plan_review_freezes_without_a_model_call_or_a_run(client, member, plan):
    response = client.post("/api/v1/plans/review/", plan, content_type="application/json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["model_requests"] == 0
    assert len(body["plan_sha256"]) == 64
    assert body["cases_per_benchmark"]["mmlu-pro"] > 0
    assert body["prices"]["sim-strong"]["sim-strong"]["output"] == "15"
    assert not Run.objects.exists() and not Call.objects.exists()
    again = client.post("/api/v1/plans/review/", plan, content_type="application/json").json()
    assert again["plan_sha256"] == body["plan_sha256"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sampling": {"logit_bias": {"1": 5}}}, "sampling"),
        ({"limits": {"idle_timeout_s": 100, "total_timeout_s": 50}}, "limits"),
        ({"limits": {"total_timeout_s": 500, "max_run_seconds": 100}}, "limits"),
        # Past the bounds the engine and the servers take: refused at review, not a run that
        # crashes its worker (a deadline past datetime's range) or fails every call.
        ({"limits": {"max_run_seconds": 1e20}}, "limits"),
        ({"limits": {"max_run_seconds": 1e12}}, "limits"),
        ({"sampling": {"seed": 10**23}}, "sampling"),
        ({"sampling": {"seed": -(2**63) - 1}}, "sampling"),
        ({"sampling": {"top_k": 2**31}}, "sampling"),
        ({"targets": ["nope"]}, "targets"),
        ({"dataset": 999999}, "dataset"),
        ({"benchmarks": ["hle"]}, "benchmarks"),
    ],
)
def test_invalid_plan_is_a_400_naming_the_field(client, member, plan, change, field):
    response = client.post(
        "/api/v1/plans/review/", {**plan, **change}, content_type="application/json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_plan" and field in body["detail"], body


def test_the_bounds_themselves_are_accepted(client, member, plan):
    from runs.vocabulary.limits import MAX_RUN_SECONDS

    change = {
        "limits": {"max_run_seconds": MAX_RUN_SECONDS},
        "sampling": {"seed": 2**63 - 1, "top_k": 2**31 - 1},
    }
    response = client.post(
        "/api/v1/plans/review/", {**plan, **change}, content_type="application/json"
    )
    assert response.status_code == 200, response.json()


def test_a_run_frozen_with_a_deadline_past_the_bound_runs_to_the_bound():
    """A plan frozen before the bound existed (1e20 s made the driver raise OverflowError on
    every start, leaving the run `running` and the recovery pass restarting it)."""
    from datetime import UTC, datetime, timedelta

    from runs.engine.driver import run_deadline
    from runs.vocabulary.limits import MAX_RUN_SECONDS

    start = datetime(2026, 12, 6, tzinfo=UTC)
    for seconds in (1e20, 1e12, MAX_RUN_SECONDS * 2):
        assert run_deadline(start, {"max_run_seconds": seconds}) == start + timedelta(
            seconds=MAX_RUN_SECONDS
        )
    assert run_deadline(start, {"max_run_seconds": 60}) == start + timedelta(seconds=60)


def test_judge_benchmark_needs_a_judge_target(client, member):
    f.target_create(slug="sim-strong", model="sim-strong")
    dataset = es.fixture_dataset(["simpleqa"])
    response = client.post(
        "/api/v1/plans/review/",
        {"name": "j", "dataset": dataset.pk, "targets": ["sim-strong"]},
        content_type="application/json",
    )
    assert response.status_code == 400 and "simpleqa" in response.json()["detail"]["judges"]


def test_same_idempotency_key_same_plan_returns_the_same_run(client, member, plan):
    first = client.post(
        "/api/v1/runs/", plan, content_type="application/json", headers={"Idempotency-Key": "k-1"}
    )
    second = client.post(
        "/api/v1/runs/", plan, content_type="application/json", headers={"Idempotency-Key": "k-1"}
    )
    assert first.status_code == 201 and second.status_code == 200
    assert second["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == second.json()["id"]
    assert Run.objects.count() == 1


def test_same_idempotency_key_with_another_plan_is_422_and_creates_nothing(client, member, plan):
    client.post(
        "/api/v1/runs/", plan, content_type="application/json", headers={"Idempotency-Key": "k-1"}
    )
    other = client.post(
        "/api/v1/runs/",
        {**plan, "name": "other"},
        content_type="application/json",
        headers={"Idempotency-Key": "k-1"},
    )
    assert other.status_code == 422
    assert other.json()["code"] == "idempotency_key_reused"
    assert Run.objects.count() == 1


def test_run_list_filters_and_cursor_pages_neither_skip_nor_repeat(client, member, plan):
    ids = []
    for i in range(7):
        ids.append(
            client.post(
                "/api/v1/runs/", {**plan, "name": f"run {i}"}, content_type="application/json"
            ).json()["id"]
        )
    Run.objects.filter(pk=ids[0]).update(status="failed", finished_at=timezone.now())
    seen: list[int] = []
    cursor = None
    while True:
        params = {"limit": 3, **({"before": cursor} if cursor else {})}
        page = client.get("/api/v1/runs/", params).json()
        seen += [r["id"] for r in page["results"]]
        if cursor is None:  # a run created while paging must not shift later pages
            client.post("/api/v1/runs/", {**plan, "name": "late"}, content_type="application/json")
        cursor = page["next_before"]
        if cursor is None:
            break
    assert seen == sorted(ids, reverse=True)
    failed = client.get("/api/v1/runs/", {"status": "failed"}).json()["results"]
    assert [r["id"] for r in failed] == [ids[0]]
    named = client.get("/api/v1/runs/", {"name": "run 3"}).json()["results"]
    assert [r["id"] for r in named] == [ids[3]]
    by_model = client.get("/api/v1/runs/", {"model": "sim-strong"}).json()["results"]
    assert len(by_model) == 8  # every run (the late one too) targets sim-strong
    row = failed[0]
    assert row["progress"]["denominator"] > 0 and row["target_types"] == ["single"]


def test_events_are_cursor_pages_without_a_total(client, member, plan):
    run_id = client.post("/api/v1/runs/", plan, content_type="application/json").json()["id"]
    page = client.get(f"/api/v1/runs/{run_id}/events/", {"limit": 1000}).json()
    assert "total" not in page and "count" not in page
    assert page["loaded"] == 1 and page["results"][0]["type"] == "run.created"
    empty = client.get(f"/api/v1/runs/{run_id}/events/", {"after": page["next_after"]}).json()
    assert empty["results"] == [] and empty["loaded"] == 0
    assert client.get(f"/api/v1/runs/{run_id}/events/", {"limit": 1001}).status_code == 400


def test_cancel_a_queued_run_is_idempotent(client, member, plan):
    run_id = client.post("/api/v1/runs/", plan, content_type="application/json").json()["id"]
    # No body; the API speaks JSON only (the test client's default is a multipart body: 415).
    first = client.post(f"/api/v1/runs/{run_id}/cancel/", content_type="application/json").json()
    second = client.post(f"/api/v1/runs/{run_id}/cancel/", content_type="application/json").json()
    assert first["cancel_requested"] is True and second["cancel_requested"] is False
    assert first["status"] == "cancelled" and first["model_requests"] == 0
    assert RunEvent.objects.filter(run_id=run_id, type="run.cancel_requested").count() == 1


def test_judge_call_detail_withholds_the_reference_answer(client, member):
    call = f.call_create(
        role="judge", request={"messages": [{"role": "user", "content": "REFERENCE-XYZ"}]}
    )
    response = client.get(f"/api/v1/runs/{call.cell.run_id}/calls/{call.pk}/")
    assert response.status_code == 200
    assert "REFERENCE-XYZ" not in response.content.decode()
