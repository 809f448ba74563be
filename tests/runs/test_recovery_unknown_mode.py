"""A recovery scope the page does not offer is refused, never reviewed or submitted as another
(R15.2, R15.3, R15.5). `/runs/N/recovery/?mode=faild` showed the undispatched plan under a URL
that said otherwise, and the no-JS form posted with `mode=everything` created an undispatched
child. The page now answers 400 naming the value and the two scopes, with no plan and no form;
nothing is created. The API already refused an unknown mode (400 `invalid_mode`) and now
also a second `mode=` in the plan's query string."""

from __future__ import annotations

import pytest

from runs.models import RecoveryRequest, Run
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs.test_recovery_pages import form_fields, parent, with_failed_cells

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_broker():
    yield
    purge_broker()


@pytest.fixture
def owner_and_run(client):
    owner = f.user_create()
    client.force_login(owner)
    run = parent(owner)
    with_failed_cells(run)
    return client, run


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"mode": "faild"}, "faild is not a recovery scope of this page"),
        ({"mode": "judge_only"}, "Judge only section"),
        ({"mode": ""}, None),  # empty: the default scope, as no mode at all
    ],
)
def test_the_review_refuses_a_scope_it_does_not_offer(owner_and_run, query, said):
    client, run = owner_and_run
    page = client.get(f"/runs/{run.pk}/recovery/", query)
    html = page.content.decode()
    if said is None:
        assert page.status_code == 200 and 'id="recovery-form"' in html
        assert 'name="mode" value="undispatched"' in html
        return
    assert page.status_code == 400, html[:500]
    assert 'id="recovery-mode-error"' in html and said in html
    assert "undispatched (Continue undispatched cases)" in html
    assert "failed (Retry known failed cases as new attempts)" in html
    # No plan of another scope shown in its place, and nothing to submit.
    assert 'id="recovery-form"' not in html and 'id="eligible-cells"' not in html


def test_a_scope_given_twice_is_refused(owner_and_run):
    client, run = owner_and_run
    page = client.get(f"/runs/{run.pk}/recovery/?mode=failed&mode=undispatched")
    html = page.content.decode()
    assert page.status_code == 400 and "given more than once (2 times)" in html
    assert 'id="recovery-form"' not in html


def test_the_no_js_form_with_an_unknown_scope_creates_nothing(owner_and_run):
    """Posted with the undispatched plan's hash, it created that child as if asked for it."""
    client, run = owner_and_run
    url = f"/runs/{run.pk}/recovery/"
    fields = form_fields(client.get(url).content.decode())
    refused = client.post(url, {**fields, "mode": "everything"})
    html = refused.content.decode()
    assert refused.status_code == 400, html[:500]
    assert "everything is not a recovery scope of this page" in html
    assert not Run.objects.filter(parent=run).exists()
    assert not RecoveryRequest.objects.exists()
    # The same form with its own scope still submits: nothing was lost on the way.
    done = client.post(url, {**fields, "mode": "undispatched"})
    assert done.status_code == 303 and Run.objects.filter(parent=run).count() == 1


def test_the_api_refuses_an_unknown_or_repeated_mode(owner_and_run):
    client, run = owner_and_run
    url = f"/api/v1/runs/{run.pk}/recovery-plan/"
    unknown = client.get(url, {"mode": "faild"})
    assert unknown.status_code == 400 and unknown.json()["code"] == "invalid_mode"
    twice = client.get(f"{url}?mode=failed&mode=undispatched")
    assert twice.status_code == 400 and "mode" in twice.json()["detail"], twice.content
    plan = client.get(url, {"mode": "undispatched"}).json()
    submitted = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {"plan_sha256": plan["plan_sha256"], "mode": "everything"},
        content_type="application/json",
        headers={"Idempotency-Key": "unknown-mode"},
    )
    assert submitted.status_code == 400 and submitted.json()["code"] == "invalid_mode"
    assert not Run.objects.filter(parent=run).exists()
