"""One protocol for every write endpoint (issue 36 item 2).

- Every POST/PUT/PATCH/DELETE route of the URL conf is walked (a new one is covered without
  editing this file) and made to refuse — a body that is not an object, an unknown id, and for
  the writes with their own rules a conflict — and every refusal is the one document
  ``{error, code, detail}``: one line of text, a snake_case code, JSON content.
- Every service refusal is a ``srbench.refusals.Refusal`` carrying its status and code, and the
  API answers exactly those (no view maps them by hand).
- Run creation, recovery and re-judge replay through the one helper: the same replay answer
  (the replay status and ``Idempotent-Replayed: true`` with the same id), and only
  ``runs/ledger/idempotency.py`` reads the idempotency-key columns.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import Cell, Run
from runs.planning.services import run_create
from runs.reporting.reconcile import ReconcileRefused
from runs.settlement.regrade import RegradeRefused
from srbench.refusals import Refusal
from tests import factories as f
from tests.compare import builders as b
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent.parent
PROJECT = ("srbench", "datasets", "runs", "compare", "recipes")
WRITE_METHODS = ("post", "put", "patch", "delete")
GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>")
CODE = re.compile(r"[a-z][a-z0-9_]*")
UNKNOWN_ID = "999999999"


def _routes(patterns: list[Any], prefix: str = "") -> Any:
    for p in patterns:
        text = prefix + str(p.pattern).lstrip("^").removesuffix("$").replace("\\", "")
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, text)
        elif isinstance(p, URLPattern):
            yield text, p.callback


def _write_methods(callback: Any) -> set[str]:
    actions = getattr(callback, "actions", None)
    if actions:  # a viewset route: the router's method → action mapping
        return {m.lower() for m in actions} & set(WRITE_METHODS)
    view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view is None:
        return set()
    return {m for m in WRITE_METHODS if hasattr(view, m)}


def write_routes() -> list[tuple[str, str]]:
    """(path pattern, method) of every write endpoint under /api/."""
    found = set()
    for path, callback in _routes(get_resolver().url_patterns):
        if path.startswith("api/") and not path.startswith("api/schema"):
            found |= {(path, m) for m in _write_methods(callback)}
    return sorted(found)


def _url(pattern: str, values: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        return values.get(match.group(1) or match.group(2), UNKNOWN_ID)

    return "/" + GROUP.sub(fill, pattern).lstrip("/")


def assert_refusal(response: Any, where: Any) -> dict[str, Any]:
    """The one refusal document (DESIGN §9), whatever refused and why."""
    assert response.status_code >= 400, (where, response.status_code)
    assert response["Content-Type"].startswith("application/json"), where
    body = response.json()
    assert set(body) == {"error", "code", "detail"}, (where, body)
    assert isinstance(body["error"], str) and body["error"].strip(), (where, body)
    assert " ".join(body["error"].split()) == body["error"], (where, body)  # one line
    assert isinstance(body["code"], str) and CODE.fullmatch(body["code"]), (where, body)
    return body


@pytest.fixture
def seeded() -> dict[str, Any]:
    owner = f.user_create(staff=True)
    run = b.run(b.questions({"mmlu-pro": 2}), {b.target("subject"): [True, False]})
    Run.objects.filter(pk=run.pk).update(owner=owner)
    client = APIClient()
    client.force_authenticate(owner)
    return {"client": client, "owner": owner, "run": run}


def test_the_walk_finds_every_kind_of_write() -> None:
    """The walk could miss routes: it must find the writes this file names below."""
    routes = {(_url(p, {}), m) for p, m in write_routes()}
    for expected in [
        ("/api/v1/runs/", "post"),
        (f"/api/v1/runs/{UNKNOWN_ID}/recover/", "post"),
        (f"/api/v1/runs/{UNKNOWN_ID}/regrade/", "post"),
        (f"/api/v1/runs/{UNKNOWN_ID}/cancel/", "post"),
        ("/api/v1/compare/", "post"),
        ("/api/v1/datasets/compose/", "post"),
    ]:
        assert expected in routes, (expected, sorted(routes))


def test_every_write_endpoint_refuses_a_bad_body_and_an_unknown_id_in_one_shape(
    seeded: dict[str, Any],
) -> None:
    """Issue 36 item 2: a non-object body and an unknown id, at every write route."""
    client, run = seeded["client"], seeded["run"]
    known = {"pk": str(run.pk), "run_id": str(run.pk), "slug": "subject"}
    provoked = 0
    for pattern, method in write_routes():
        bad_body = client.generic(
            method.upper(), _url(pattern, known), "[1]", content_type="application/json"
        )
        assert_refusal(bad_body, (pattern, method, "bad body"))
        provoked += 1
        if GROUP.search(pattern):
            unknown = client.generic(
                method.upper(), _url(pattern, {}), "{}", content_type="application/json"
            )
            body = assert_refusal(unknown, (pattern, method, "unknown id"))
            assert unknown.status_code == 404 and body["code"] == "not_found", (pattern, body)
            provoked += 1
    assert provoked > 10


def test_conflicts_and_unmet_conditions_answer_the_refusal_they_carry(
    seeded: dict[str, Any],
) -> None:
    """Each service refusal is answered with its own class's status and code."""
    client, owner, run = seeded["client"], seeded["owner"], seeded["run"]
    running = b.run(b.questions({"mmlu-pro": 1}), {b.target("other"): [True]}, status="running")
    Run.objects.filter(pk=running.pk).update(owner=owner)
    preview = b.run(b.questions({"mmlu-pro": 1}), {b.target("third"): [True]}, mode="preview")
    Run.objects.filter(pk=preview.pk).update(owner=owner)
    cases = [
        (f"/api/v1/runs/{running.pk}/reconcile-usage/", {}, ReconcileRefused),
        (f"/api/v1/runs/{preview.pk}/regrade/", {}, RegradeRefused),
    ]
    for url, data, refusal in cases:
        r = client.post(url, data, format="json")
        body = assert_refusal(r, url)
        assert (r.status_code, body["code"]) == (refusal.http_status, refusal.code), body
    unreviewed = {"plan_sha256": "0" * 64, "mode": "undispatched"}
    r = client.post(
        f"/api/v1/runs/{run.pk}/recover/", unreviewed, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert (r.status_code, assert_refusal(r, "recover")["code"]) == (409, "recovery_plan_changed")
    r = client.post(f"/api/v1/runs/{run.pk}/regrade/", {"rejudge": True}, format="json")
    assert assert_refusal(r, "rejudge")["code"] in ("judge_cost_unconfirmed", "nothing_to_rejudge")
    r = client.post("/api/v1/compare/", {"baseline": 999999, "candidates": [run.pk]}, format="json")
    assert (r.status_code, assert_refusal(r, "compare")["code"]) == (404, "not_found")


def _all_subclasses(cls: type) -> set[type]:
    return {c for s in cls.__subclasses__() for c in {s, *_all_subclasses(s)}}


def test_every_refusal_type_carries_a_status_and_a_code() -> None:
    """The refusal vocabulary: every service error the API answers is a Refusal subclass with
    an HTTP error status and a snake_case code (the API's URL conf imports them all)."""
    import runs.reporting.export  # noqa: F401  (imported by its view at call time)
    import srbench.urls  # noqa: F401  (every API module, so every refusal class)

    kinds = _all_subclasses(Refusal)
    names = {k.__name__ for k in kinds}
    for name in [
        "PlanError",
        "ChildRunRefused",
        "IdempotencyKeyReused",
        "InvalidIdempotencyKey",
        "RegradeRefused",
        "ReconcileRefused",
        "ExportRefused",
        "ComparisonError",
        "MarginFrozen",
        "IncomparableRuns",
        "CandidatesRefused",
        "PreparationConflict",
        "PackageUnavailable",
        "CompositionInvalid",
        "CompositionConflict",
        "PreviewError",
        "PreviewNotPossible",
    ]:
        assert name in names, name
    for kind in kinds:
        assert 400 <= kind.http_status <= 599 and CODE.fullmatch(kind.code), kind


# --- one idempotency key, one replay helper ---------------------------------------------------


def _recoverable(owner: Any) -> tuple[Run, dict[str, Any]]:
    """An interrupted run whose cells were never dispatched, and its reviewed plan."""
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    dataset = es.fixture_dataset(["arc"])
    run, _ = run_create(
        owner=owner, plan={"name": "p", "dataset": dataset.pk, "targets": ["sim-strong"]}
    )
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=timezone.now())
    cells = sorted(Cell.objects.filter(run=run).values_list("pk", flat=True))
    return run, {"mode": "undispatched", "selected_cells": cells[:2]}


def _rejudgeable() -> Run:
    qs = b.questions({"simpleqa": 2})
    prices = {"m-judge": {"input": "1", "output": "2"}}
    b.target("judge", model="m-judge", prices=prices)
    snapshot = {
        "slug": "judge",
        "kind": "single",
        "model": "m-judge",
        "fixed_params": {"max_tokens": 256},
        "max_inference_calls": None,
    }
    subject = b.target("subject")
    return b.run(
        qs,
        {subject: [True, False]},
        judges={"simpleqa": snapshot},
        prices={"subject": subject.prices, "judge": prices},
    )


def test_run_recovery_and_rejudge_replay_through_one_helper() -> None:
    """The same key twice: the first answer makes the thing, the second is the replay answer
    of runs/ledger/idempotency.py `replay_response` — the same id, the replay status and the header —
    for all three; a third with the key and another request is the one 422 refusal."""
    owner = f.user_create(staff=True)
    client = APIClient()
    client.force_authenticate(owner)
    target = f.target_create(slug="sim-x", model="sim-x")
    plan = {"name": "k", "dataset": es.fixture_dataset(["mmlu-pro"]).pk, "targets": [target.slug]}
    parent, review = _recoverable(owner)
    review["plan_sha256"] = client.get(
        f"/api/v1/runs/{parent.pk}/recovery-plan/", {"mode": "undispatched"}
    ).json()["plan_sha256"]
    judged = _rejudgeable()
    Run.objects.filter(pk=judged.pk).update(owner=owner)
    regrade = f"/api/v1/runs/{judged.pk}/regrade/"
    worst = client.post(regrade, {"rejudge": True}, format="json").json()["detail"]
    confirm = {"rejudge": True, "confirm_judge_cost": worst["worst_case_usd"]}
    writes = [
        ("/api/v1/runs/", plan, {**plan, "name": "other"}, "id", (201, 200)),
        (f"/api/v1/runs/{parent.pk}/recover/", review, None, "id", (201, 200)),
        (regrade, confirm, None, "child_run", (202, 202)),
    ]
    for url, body, other, field, statuses in writes:
        key = f"key-{url}"
        first = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
        again = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert (first.status_code, again.status_code) == statuses, (url, first.json())
        assert "Idempotent-Replayed" not in first and again["Idempotent-Replayed"] == "true"
        assert again.json()[field] == first.json()[field]
        if other is not None:
            reused = client.post(url, other, format="json", HTTP_IDEMPOTENCY_KEY=key)
            body_ = assert_refusal(reused, url)
            assert (reused.status_code, body_["code"]) == (422, "idempotency_key_reused")
    # One refusal for a key that cannot be stored, at all three.
    for url, body, *_ in writes:
        r = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 256)
        assert (r.status_code, assert_refusal(r, url)["code"]) == (400, "invalid_idempotency_key")


# --- architecture: one reader of the idempotency columns --------------------------------------

READERS = ("filter", "get", "exclude", "get_or_create", "update_or_create", "values_list")
# The tables of the key of run creation, recovery and re-judge. A query rooted at another model
# class (e.g. a target's preflight record, with a key of its own) is not theirs.
KEY_TABLES = {"Run", "RecoveryRequest"}


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def key_readers(source: str, name: str) -> list[str]:
    """Where a module reads runs or recovery requests by an idempotency key (a query keyword
    ``idempotency_key…`` on ``Run``/``RecoveryRequest`` or on any queryset variable)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in READERS
            and any((k.arg or "").startswith("idempotency_key") for k in node.keywords)
        ):
            root = _root(node.func.value) or ""
            if root[:1].isupper() and root not in KEY_TABLES:
                continue
            found.append(f"{name}:{node.lineno}")
    return found


def test_the_check_sees_a_second_reader() -> None:
    source = (
        "def f(key, runs):\n"
        "    Run.objects.filter(owner=1, idempotency_key=key).first()\n"
        "    runs.filter(idempotency_key=key)\n"
        "    Other.objects.filter(idempotency_key=key)\n"
    )
    assert sorted(key_readers(source, "runs/x.py")) == ["runs/x.py:2", "runs/x.py:3"]


def test_only_the_replay_helper_reads_the_idempotency_columns() -> None:
    readers = []
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                readers += key_readers(path.read_text(), str(path.relative_to(ROOT)))
    assert readers and all(r.startswith("runs/ledger/idempotency.py:") for r in readers), readers
