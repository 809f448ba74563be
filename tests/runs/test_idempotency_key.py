"""An Idempotency-Key longer than the columns that store it is refused (a 400, never a database
error) with the one refusal every entry point gives (issue 36 item 2: before, each entry point
had its own shape); one of exactly that length is taken. The length is one rule
(runs/ledger/idempotency.py), read from the model columns."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.ledger.idempotency import InvalidIdempotencyKey
from runs.models import RecoveryRequest, Run
from runs.settlement.recovery import recovery_submit
from runs.settlement.rejudge import rejudge_submit
from srbench.refusals import Refusal
from tests import factories as f
from tests.compare import builders as b
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

LONGEST = 255  # the columns' max_length in runs/models.py
TOO_LONG = "k" * (LONGEST + 1)
# The one refusal of a key that cannot be stored, from the API and from every service.
KEY_MESSAGE = (
    "the idempotency key must be a string of at most 255 characters, valid Unicode without NUL"
)
KEY_REFUSAL = {
    "error": KEY_MESSAGE,
    "code": "invalid_idempotency_key",
    "detail": {"max_length": 255},
}
SERVICE_REFUSAL = ("invalid_idempotency_key", KEY_MESSAGE, 400)
UNREVIEWED = {"plan_sha256": "0" * 64, "mode": "undispatched"}


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _finished_run(owner: Any) -> Run:
    subject = b.target("subject")
    run = b.run(b.questions({"mmlu-pro": 2}), {subject: [True, False]})
    Run.objects.filter(pk=run.pk).update(owner=owner)
    run.refresh_from_db()
    return run


def test_the_rule_is_the_columns_length() -> None:
    from runs.ledger.idempotency import IDEMPOTENCY_KEY_MAX

    assert IDEMPOTENCY_KEY_MAX == LONGEST
    for model in (Run, RecoveryRequest):
        assert model._meta.get_field("idempotency_key").max_length == LONGEST


def test_a_run_create_refuses_a_key_one_too_long_and_takes_one_exactly_long() -> None:
    owner = f.user_create()
    client = _client(owner)
    target = f.target_create(slug="sim-strong", model="sim-strong")
    plan = {"name": "k", "dataset": es.fixture_dataset(["arc"]).pk, "targets": [target.slug]}
    for sent in (
        {"HTTP_IDEMPOTENCY_KEY": TOO_LONG},
        {"data": {**plan, "idempotency_key": TOO_LONG}},
    ):
        r = client.post("/api/v1/runs/", sent.pop("data", plan), format="json", **sent)
        assert (r.status_code, r.json()) == (400, KEY_REFUSAL)
    assert not Run.objects.exists()
    made = client.post("/api/v1/runs/", plan, format="json", HTTP_IDEMPOTENCY_KEY="k" * LONGEST)
    assert made.status_code == 201, made.json()
    assert Run.objects.get(pk=made.json()["id"]).idempotency_key == "k" * LONGEST


def test_a_rejudge_refuses_a_key_one_too_long() -> None:
    owner = f.user_create(staff=True)
    parent = _finished_run(owner)
    r = _client(owner).post(
        f"/api/v1/runs/{parent.pk}/regrade/",
        {"rejudge": True, "confirm_judge_cost": "0"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=TOO_LONG,
    )
    assert (r.status_code, r.json()) == (400, KEY_REFUSAL)
    with pytest.raises(InvalidIdempotencyKey) as refused:
        rejudge_submit(run=parent, confirm_judge_cost=None, user=owner, idempotency_key=TOO_LONG)
    assert (refused.value.code, refused.value.message, refused.value.http_status) == (
        SERVICE_REFUSAL
    )
    with pytest.raises(Refusal) as past_the_key:  # the key passes; the run has no judge
        rejudge_submit(run=parent, confirm_judge_cost=None, user=owner, idempotency_key="k" * 255)
    assert past_the_key.value.code != "invalid_idempotency_key"
    assert not Run.objects.filter(parent=parent).exists()


def test_a_recovery_refuses_a_key_one_too_long() -> None:
    owner = f.user_create(staff=True)
    parent = _finished_run(owner)
    client = _client(owner)
    url = f"/api/v1/runs/{parent.pk}/recover/"
    expected = KEY_REFUSAL
    for body, headers in (
        (UNREVIEWED, {"HTTP_IDEMPOTENCY_KEY": TOO_LONG}),
        ({**UNREVIEWED, "idempotency_key": TOO_LONG}, {}),
    ):
        r = client.post(url, body, format="json", **headers)
        assert (r.status_code, r.json()) == (400, expected)
    with pytest.raises(InvalidIdempotencyKey) as refused:
        recovery_submit(run=parent, plan=UNREVIEWED, user=owner, idempotency_key=TOO_LONG)
    assert (refused.value.code, refused.value.message, refused.value.http_status) == (
        SERVICE_REFUSAL
    )
    # Exactly as long: past the key, refused for the plan it names (never reviewed).
    r = client.post(url, UNREVIEWED, format="json", HTTP_IDEMPOTENCY_KEY="k" * LONGEST)
    assert (r.status_code, r.json()["code"]) == (409, "recovery_plan_changed")
    assert not RecoveryRequest.objects.exists()
