"""What a recovery's success answers (R15.4; third outside probe, session 6): counts always,
the first ten parent cell ids (the rule refusals follow, `srbench.refusals.echo_items`) and
where all of them are read — never every id. The parent is a large interrupted run built
directly in the ledger (its cells never dispatched); no model is called."""

from __future__ import annotations

import json

import pytest

from runs.models import Cell, Run
from srbench.canonical import sha256_hex
from tests import factories as f
from tests.cli_support import bench
from tests.runs.recovery_support import recovery_parent

pytestmark = pytest.mark.django_db

QUESTIONS = 500
SLOTS = 16
CELLS = QUESTIONS * SLOTS  # 8,000: the answer used to hold 16,000 ids, about 130 KB
BODY_MAX = 4_000


def _large_parent(owner) -> tuple[Run, list[int]]:
    """An interrupted live run of QUESTIONS questions × SLOTS attempt slots, none dispatched:
    every cell is eligible for an undispatched recovery. Returns it and its cell ids."""
    run = recovery_parent(owner, questions=QUESTIONS, slots=SLOTS)
    return run, sorted(Cell.objects.filter(run=run).values_list("pk", flat=True))


def _bounded(recovery: dict, ids: list[int], child_id: int) -> None:
    """The child's `recovery`: counts, the first ten ids, how many left out, the hash of all,
    and the child's cells as the way to read every one."""
    echo = {"count": len(ids), "first": ids[:10], "omitted": len(ids) - 10}
    assert recovery["selected_cells"] == echo
    assert recovery["eligible_cells"] == echo
    assert recovery["selected_cells_sha256"] == sha256_hex(ids)
    assert recovery["cells"] == f"/api/v1/runs/{child_id}/results/"
    assert recovery["mode"] == "undispatched" and recovery["parent_snapshot"]["progress"]


def test_a_recovery_of_thousands_of_cells_answers_counts_and_ten_ids_not_every_id(client):
    owner = f.user_create()
    client.force_login(owner)
    run, ids = _large_parent(owner)
    assert len(ids) == CELLS
    page = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "undispatched", "limit": 1})
    # A page of the plan is one page: it carried every selected id too (39,716 bytes here).
    assert len(page.content) < BODY_MAX, len(page.content)
    plan = page.json()
    assert plan["counts"]["eligible"] == CELLS and plan["selected_cells_count"] == CELLS
    assert "selected_cells" not in plan and len(plan["eligible_cells"]) == 1
    body = {"plan_sha256": plan["plan_sha256"], "mode": "undispatched"}

    created = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        body,
        content_type="application/json",
        headers={"Idempotency-Key": "large"},
    )
    assert created.status_code == 201, created.content[:500]
    assert len(created.content) < BODY_MAX, len(created.content)
    child = created.json()
    assert child["progress"]["denominator"] == CELLS
    _bounded(child["recovery"], ids, child["id"])
    # The ledger keeps the whole selection (the marker the hash and the lineage read).
    marker = Run.objects.get(pk=child["id"]).manifest["recovery"]
    assert marker["selected_cells"] == ids and marker["eligible_cells"] == ids

    # The replay answers the same bounded body (200, Idempotent-Replayed).
    replay = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        body,
        content_type="application/json",
        headers={"Idempotency-Key": "large"},
    )
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert len(replay.content) < BODY_MAX
    _bounded(replay.json()["recovery"], ids, child["id"])

    # `cells` lists every one, a page at a time: one child cell per selected parent cell.
    page = client.get(child["recovery"]["cells"]).json()
    assert len(page["results"]) == 100 and page["next_after"] is not None
    parent_first = Cell.objects.filter(pk__in=ids[:100]).order_by("pk")
    assert [(c["question"], c["slot"]) for c in page["results"]] == [
        (c.question_id, c.slot) for c in parent_first
    ]


def test_the_cli_recover_prints_the_bounded_answer(client, capsys, tmp_path):
    """`benchmark recover --json` prints the API's answer: the same counts and ten ids; the
    human line says how many cells and where they are listed."""
    ops = f.user_create(username="ops", staff=True)
    client.force_login(ops)
    run, ids = _large_parent(ops)
    plan = client.get(
        f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "undispatched", "limit": 1}
    ).json()
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"plan_sha256": plan["plan_sha256"], "mode": "undispatched"}))
    args = ["recover", str(run.pk), "--plan", str(path), "--idempotency-key", "cli-large"]
    code, out, err = bench(capsys, *args, "--user", "ops", "--json")
    assert code == 0, err
    assert len(out) < BODY_MAX, len(out)
    child = json.loads(out)
    _bounded(child["recovery"], ids, child["id"])

    code, out, err = bench(capsys, *args, "--user", "ops")
    assert code == 0 and "already existed" in err
    assert f"run {child['id']}: " in out and f"{CELLS} cells" in out
    assert f"benchmark show {child['id']} --results" in out
    assert len(out) < 1_000


def test_the_api_schema_documents_the_bounded_answer(client):
    """The OpenAPI schema says what a client reads: `recovery.selected_cells` and
    `eligible_cells` as {count, first, omitted}, with `cells` the way to read them all."""
    client.force_login(f.user_create())
    schema = client.get("/api/schema/", {"format": "json"}).json()
    answer = schema["paths"]["/api/v1/runs/{id}/recover/"]["post"]["responses"]["201"]
    ref = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    recovery = schema["components"]["schemas"][ref]["properties"]["recovery"]
    assert recovery["nullable"] is True
    marker = schema["components"]["schemas"]["RecoveryMarker"]["properties"]
    assert marker["selected_cells"]["allOf"][0]["$ref"].endswith("/CellEcho")
    assert "never all of them" in marker["selected_cells"]["description"]
    assert "child run's cells" in marker["cells"]["description"]
    echo = schema["components"]["schemas"]["CellEcho"]["properties"]
    assert set(echo) == {"count", "first", "omitted"}
