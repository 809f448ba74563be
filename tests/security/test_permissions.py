"""Who may act on a run (issue 19 point 4; docs/reliability.md "Who may do what").

Every signed-in member reads every run. Cancelling, submitting a recovery, reconciling usage,
re-grading and exporting are for the run's owner and for operators: a member acting on
someone else's run is refused with 403 (a JSON error from the API, a page saying why from the
forms, one `error:` line from the CLI) and the ledger is exactly as it was."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from datasets.models import FrozenDataset
from runs.models import (
    Call,
    CallEvidence,
    Cell,
    RecoveryClaim,
    RecoveryRequest,
    Regrade,
    Run,
    RunEvent,
    Target,
    UsageCorrection,
)
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

LEDGER = (
    Run,
    Cell,
    Call,
    CallEvidence,
    RunEvent,
    UsageCorrection,
    Regrade,
    RecoveryRequest,
    RecoveryClaim,
)


def ledger() -> dict[str, list[dict[str, Any]]]:
    """Every row of the run, its cells, calls, evidence, events, corrections, regrades,
    recovery requests, claims and child runs (children are Run rows)."""
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in LEDGER}


@pytest.fixture(autouse=True)
def _clean_broker():  # type: ignore[no-untyped-def]
    # An accepted cancel or recovery may ring the broker; no worker runs here.
    yield
    purge_broker()


@pytest.fixture
def people() -> dict[str, Any]:
    return {
        "owner": f.user_create(username="owner"),
        "member": f.user_create(username="member"),
        "operator": f.user_create(username="operator", staff=True),
    }


def planned_run(owner: Any, *, status: str) -> Run:
    """A real frozen run of four mmlu-pro questions on one target, moved to `status`."""
    Target.objects.get_or_create(
        slug="sim-strong",
        defaults={
            "name": "strong",
            "model": "sim-strong",
            "base_url": "http://127.0.0.1:9/v1",
            "prices": {"sim-strong": es.PRICES["sim-strong"]},
        },
    )
    dataset = FrozenDataset.objects.filter(name="fixtures").first() or es.fixture_dataset(
        ["mmlu-pro"], per_benchmark=4
    )
    run, _ = run_create(
        owner=owner, plan={"name": "theirs", "dataset": dataset.pk, "targets": ["sim-strong"]}
    )
    if status == "running":
        Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())
    elif status != "queued":
        Run.objects.filter(pk=run.pk).update(
            status=status, started_at=timezone.now(), finished_at=timezone.now()
        )
    run.refresh_from_db()
    return run


def completed_run(owner: Any) -> Run:
    """Every cell answered and graded, each with its subject call: regrade, reconcile and
    export all have something to work on."""
    run = planned_run(owner, status="completed")
    for cell in Cell.objects.filter(run=run).select_related("target"):
        Cell.objects.filter(pk=cell.pk).update(
            status="completed", final_answer="Answer: A", scored=True, correct=False
        )
        f.call_create(
            cell=cell, status="completed", output_tokens=7, input_tokens=30, cost_usd="0.0002"
        )
    return run


def failed_run(owner: Any) -> Run:
    """Two failed cells that already cost money; the rest never dispatched."""
    run = planned_run(owner, status="failed")
    for cell in list(Cell.objects.filter(run=run).select_related("target").order_by("pk"))[:2]:
        Cell.objects.filter(pk=cell.pk).update(status="failed")
        f.call_create(cell=cell, status="failed", output_tokens=10, cost_usd="0.0003")
    return run


def recover_body(run: Run, mode: str) -> dict[str, Any]:
    """A reviewed plan, as a client sends it back (reviewing is a read anyone may do)."""
    plan = recovery_plan(run=run, mode=mode)
    body: dict[str, Any] = {"plan_sha256": plan["plan_sha256"], "mode": mode}
    if mode == "failed":
        body["selected_cells"] = [e["cell"] for e in plan["eligible_cells"]]
        body["acknowledge_new_attempt"] = True
    return body


# Each write action: (method, URL suffix, the run it needs, the body, the status it answers
# when allowed, what the allowed request changed).
Action = tuple[str, str, Callable[[Any], Run], Callable[[Run], Any], int, Callable[[Run], bool]]
ACTIONS: dict[str, Action] = {
    "cancel": (
        "post",
        "cancel/",
        lambda owner: planned_run(owner, status="running"),
        lambda run: None,
        200,
        lambda run: Run.objects.get(pk=run.pk).cancel_requested_at is not None,
    ),
    "reconcile-usage": (
        "post",
        "reconcile-usage/",
        completed_run,
        lambda run: None,
        200,
        lambda run: UsageCorrection.objects.filter(run=run).count() == 1,
    ),
    "regrade": (
        "post",
        "regrade/",
        completed_run,
        lambda run: None,
        200,
        lambda run: Regrade.objects.filter(run=run).count() == 1,
    ),
    "export": ("get", "export/", completed_run, lambda run: None, 200, lambda run: True),
    "recover-undispatched": (
        "post",
        "recover/",
        failed_run,
        lambda run: {**recover_body(run, "undispatched"), "idempotency_key": "k-1"},
        201,
        lambda run: Run.objects.filter(parent=run).count() == 1,
    ),
    "recover-failed": (
        "post",
        "recover/",
        failed_run,
        lambda run: {**recover_body(run, "failed"), "idempotency_key": "k-2"},
        201,
        lambda run: Run.objects.filter(parent=run).count() == 1,
    ),
}


def api_call(client: Client, action: str, run: Run, body: Any) -> Any:
    method, suffix, *_ = ACTIONS[action]
    url = f"/api/v1/runs/{run.pk}/{suffix}"
    if method == "get":
        return client.get(url)
    return client.post(
        url, data=json.dumps(body) if body is not None else "", content_type="application/json"
    )


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the REST API (and so the CLI, which speaks only to it) ---------------------------------


@pytest.mark.parametrize("action", ACTIONS)
def test_a_member_cannot_act_on_someone_elses_run_and_nothing_changes(
    people: dict[str, Any], action: str
) -> None:
    _, _, make_run, make_body, _, _ = ACTIONS[action]
    run = make_run(people["owner"])
    body = make_body(run)
    before = ledger()

    response = api_call(logged_in(people["member"]), action, run, body)

    assert response.status_code == 403, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()
    assert error["code"] == "not_run_owner" and error["detail"] is None
    assert f"run #{run.pk}" in error["error"] and "nothing was changed" in error["error"]
    assert ledger() == before


@pytest.mark.parametrize("actor", ["owner", "operator"])
@pytest.mark.parametrize("action", ACTIONS)
def test_the_owner_and_an_operator_can_act_on_the_run(
    people: dict[str, Any], action: str, actor: str
) -> None:
    _, _, make_run, make_body, ok_status, changed = ACTIONS[action]
    run = make_run(people["owner"])

    response = api_call(logged_in(people[actor]), action, run, make_body(run))

    assert response.status_code == ok_status, response.content
    assert changed(run)


@pytest.mark.parametrize("action", ACTIONS)
def test_an_anonymous_client_is_refused_with_401_and_nothing_changes(
    people: dict[str, Any], action: str
) -> None:
    _, _, make_run, make_body, _, _ = ACTIONS[action]
    run = make_run(people["owner"])
    body = make_body(run)
    before = ledger()

    response = api_call(Client(), action, run, body)

    assert response.status_code == 401
    assert set(response.json()) == {"error", "code", "detail"}
    assert ledger() == before


def test_a_missing_run_is_still_404_for_a_member(people: dict[str, Any]) -> None:
    client = logged_in(people["member"])
    missing = client.post("/api/v1/runs/999999/cancel/", content_type="application/json")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    missing = client.post("/api/v1/runs/999999/recover/", data={}, content_type="application/json")
    assert missing.status_code == 404


def test_every_member_reads_every_run(people: dict[str, Any]) -> None:
    """Reading is for the whole team: runs, reports, results, calls, events, lineage, the
    recovery plan, and the pages of another member's run."""
    run = failed_run(people["owner"])
    client = logged_in(people["member"])
    for url in (
        f"/api/v1/runs/{run.pk}/",
        f"/api/v1/runs/{run.pk}/report/",
        f"/api/v1/runs/{run.pk}/results/",
        f"/api/v1/runs/{run.pk}/calls/",
        f"/api/v1/runs/{run.pk}/events/",
        f"/api/v1/runs/{run.pk}/lineage/",
        f"/api/v1/runs/{run.pk}/recovery-plan/?mode=failed",
        "/api/v1/runs/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/?tab=calls",
        f"/runs/{run.pk}/recovery/?mode=failed",
    ):
        assert client.get(url).status_code == 200, url


# --- the pages ------------------------------------------------------------------------------


def test_the_cancel_button_is_offered_only_to_the_owner_and_operators(
    people: dict[str, Any],
) -> None:
    run = planned_run(people["owner"], status="running")
    page = logged_in(people["member"]).get(f"/runs/{run.pk}/").content.decode()
    assert 'id="cancel-form"' not in page
    assert "Only the run's owner (owner) or an operator can cancel this run." in page
    for actor in ("owner", "operator"):
        page = logged_in(people[actor]).get(f"/runs/{run.pk}/").content.decode()
        assert 'id="cancel-form"' in page and 'id="cancel-not-allowed"' not in page


def test_a_member_posting_the_cancel_form_of_someone_elses_run_gets_a_403_page(
    people: dict[str, Any],
) -> None:
    run = planned_run(people["owner"], status="running")
    before = ledger()

    response = logged_in(people["member"]).post(f"/runs/{run.pk}/cancel/", {"confirm": "yes"})

    assert response.status_code == 403
    page = response.content.decode()
    assert 'id="permission-denied"' in page
    assert f"Only the owner of run #{run.pk} or an operator may cancel it" in page
    assert ledger() == before


@pytest.mark.parametrize("actor", ["owner", "operator"])
def test_the_owner_and_an_operator_cancel_through_the_form(
    people: dict[str, Any], actor: str
) -> None:
    run = planned_run(people["owner"], status="running")

    response = logged_in(people[actor]).post(f"/runs/{run.pk}/cancel/", {"confirm": "yes"})

    assert response.status_code == 303
    assert Run.objects.get(pk=run.pk).cancel_requested_at is not None
    assert RunEvent.objects.filter(run=run, type="run.cancel_requested", payload__by=actor).exists()


def test_a_member_reviews_someone_elses_recovery_plan_but_is_offered_no_submit(
    people: dict[str, Any],
) -> None:
    run = failed_run(people["owner"])
    page = logged_in(people["member"]).get(f"/runs/{run.pk}/recovery/?mode=failed")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="eligible-cells"' in html and 'id="recovery-plan-hash"' in html
    assert 'id="recovery-submit"' not in html and 'id="acknowledge"' not in html
    assert 'id="recovery-not-allowed"' in html and "(owner) or an operator" in html
    owner_page = logged_in(people["owner"]).get(f"/runs/{run.pk}/recovery/?mode=failed")
    assert 'id="recovery-submit"' in owner_page.content.decode()


@pytest.mark.parametrize("mode", ["undispatched", "failed"])
def test_a_member_posting_the_recovery_form_of_someone_elses_run_gets_a_403_page(
    people: dict[str, Any], mode: str
) -> None:
    run = failed_run(people["owner"])
    body = recover_body(run, mode)
    form = {
        "mode": mode,
        "plan_sha256": body["plan_sha256"],
        "idempotency_key": "form-1",
        "cell": body.get("selected_cells", []),
        "acknowledge_new_attempt": "on",
    }
    before = ledger()

    response = logged_in(people["member"]).post(f"/runs/{run.pk}/recovery/", form)

    assert response.status_code == 403
    assert (
        f"Only the owner of run #{run.pk} or an operator may submit a recovery of it"
        in response.content.decode()
    )
    assert ledger() == before


@pytest.mark.parametrize("actor", ["owner", "operator"])
def test_the_owner_and_an_operator_submit_a_recovery_through_the_form(
    people: dict[str, Any], actor: str
) -> None:
    run = failed_run(people["owner"])
    body = recover_body(run, "failed")
    form = {
        "mode": "failed",
        "plan_sha256": body["plan_sha256"],
        "idempotency_key": "form-1",
        "cell": body["selected_cells"],
        "acknowledge_new_attempt": "on",
    }

    response = logged_in(people[actor]).post(f"/runs/{run.pk}/recovery/", form)

    assert response.status_code == 303, response.content.decode()[:2000]
    child = Run.objects.get(parent=run)
    assert response["Location"] == f"/runs/{child.pk}/"
    assert child.owner == people[actor]


# --- the CLI in process (the same API, as the named user) ---------------------------------


def cli(*args: str, capsys: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        call_command("benchmark", *args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_refuses_a_member_acting_on_someone_elses_run_in_one_line(
    people: dict[str, Any], capsys: Any
) -> None:
    running = planned_run(people["owner"], status="running")
    done = completed_run(people["owner"])
    before = ledger()
    for args in (
        ["cancel", str(running.pk)],
        ["regrade", str(done.pk)],
        ["reconcile-usage", str(done.pk)],
    ):
        code, out, err = cli(*args, "--user", "member", capsys=capsys)
        assert code == 2, (args, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), err
        assert "or an operator may" in lines[0]
    assert ledger() == before

    code, _, err = cli("cancel", str(running.pk), "--user", "owner", capsys=capsys)
    assert code == 0, err
    assert Run.objects.get(pk=running.pk).cancel_requested_at is not None
