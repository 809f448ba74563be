"""Cursor pages neither skip nor repeat a row while rows are inserted between reads
(issue 7, R13, R14): runs (before), results and calls (after), events (after), datasets and
sources (keyset `before`), a dataset's questions (frozen, page numbers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from datasets.models import DatasetQuestion
from runs.ledger.events import events_append
from runs.models import Call, Cell, Run
from tests import factories as f
from tests.compare import builders as b
from tests.datasets.factories import source_with_questions
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client):  # type: ignore[no-untyped-def]
    client.force_login(f.user_create())

    def get(path: str, **params: Any) -> dict[str, Any]:
        response = client.get(path, params)
        assert response.status_code == 200, response.content
        return response.json()

    return get


def read_all(
    get: Callable[..., dict[str, Any]],
    path: str,
    *,
    cursor: str,
    next_key: str,
    key: str,
    insert: Callable[[], Any],
    **params: Any,
) -> list[Any]:
    """Read every page, inserting a row after each of the first three reads (an ascending
    cursor would otherwise chase the inserts forever); return the keys seen in order."""
    seen: list[Any] = []
    position: Any = 0
    for reads in range(1000):
        page = get(path, **{**params, cursor: position})
        seen += [row[key] for row in page["results"]]
        if reads < 3:
            insert()
        if page[next_key] is None:
            return seen
        position = page[next_key]
    raise AssertionError("the cursor never ended")


def test_runs_before_cursor(api) -> None:  # type: ignore[no-untyped-def]
    owner = f.user_create()
    existing = [f.run_create(owner=owner).pk for _ in range(7)]
    seen = read_all(
        api,
        "/api/v1/runs/",
        cursor="before",
        next_key="next_before",
        key="id",
        insert=lambda: f.run_create(owner=owner),
        limit=3,
    )
    # Newest first; runs created while paging are newer than the cursor and never shift a page.
    assert seen == sorted(existing, reverse=True)


@pytest.fixture
def finished_run():  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": 7})
    return b.run(qs, {b.target("pg-a"): [True] * 7})


def test_results_after_cursor(api, finished_run) -> None:  # type: ignore[no-untyped-def]
    before = list(Cell.objects.filter(run=finished_run).order_by("pk").values_list("pk", flat=True))
    target = Cell.objects.filter(run=finished_run).first().target

    def insert() -> None:
        Cell.objects.create(
            run=finished_run,
            question=f.question_create(),
            target=target,
            benchmark="mmlu-pro",
            slot=1,
        )

    seen = read_all(
        api,
        f"/api/v1/runs/{finished_run.pk}/results/",
        cursor="after",
        next_key="next_after",
        key="id",
        insert=insert,
        limit=3,
    )
    everything = list(
        Cell.objects.filter(run=finished_run).order_by("pk").values_list("pk", flat=True)
    )
    assert seen[: len(before)] == before  # nothing skipped
    assert len(seen) == len(set(seen))  # nothing repeated
    assert set(seen) <= set(everything)  # rows that arrived behind the cursor are read too


def test_calls_after_cursor_including_active(api, finished_run) -> None:  # type: ignore[no-untyped-def]
    # Calls in flight belong to a run still going: the database refuses a terminal run with
    # an open call (issue 20).
    Run.objects.filter(pk=finished_run.pk).update(status="running", finished_at=None)
    cells = list(Cell.objects.filter(run=finished_run).order_by("pk"))
    before = list(
        Call.objects.filter(cell__run=finished_run).order_by("pk").values_list("pk", flat=True)
    )

    def insert() -> None:
        cell = cells[len(Call.objects.filter(cell__run=finished_run)) % len(cells)]
        # Opened as a worker opens it, under its cell's claim (fencing, issue 34).
        f.call_create(
            cell=cell,
            target=cell.target,
            role="subject",
            sequence=Call.objects.filter(cell=cell).count(),
            request={},
            sent_at=timezone.now(),
            status="streaming",
        )

    seen = read_all(
        api,
        f"/api/v1/runs/{finished_run.pk}/calls/",
        cursor="after",
        next_key="next_after",
        key="id",
        insert=insert,
        limit=3,
    )
    assert seen[: len(before)] == before and len(seen) == len(set(seen))
    assert seen == sorted(seen)
    active = read_all(
        api,
        f"/api/v1/runs/{finished_run.pk}/calls/",
        cursor="after",
        next_key="next_after",
        key="id",
        insert=lambda: None,
        limit=2,
        active="true",
    )
    assert active == list(
        Call.objects.filter(cell__run=finished_run, status__in=["sent", "streaming"])
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def test_events_after_cursor(api, finished_run) -> None:  # type: ignore[no-untyped-def]
    def append(n: int = 1) -> None:
        with transaction.atomic():
            events_append(run_id=finished_run.pk, events=[("test.tick", {})] * n)

    append(9)
    seen = read_all(
        api,
        f"/api/v1/runs/{finished_run.pk}/events/",
        cursor="after",
        next_key="next_after",
        key="seq",
        insert=append,
        limit=4,
    )
    # Every event, in order, exactly once — the ones appended while reading included.
    assert seen == list(range(1, len(seen) + 1)) and len(seen) >= 9


def test_datasets_keyset_pages(api) -> None:  # type: ignore[no-untyped-def]
    existing = [f.dataset_create().pk for _ in range(5)]
    seen = read_all(
        api,
        "/api/v1/datasets/",
        cursor="before",
        next_key="next_before",
        key="id",
        insert=f.dataset_create,
        page_size=2,
    )
    assert seen == sorted(existing, reverse=True)


def test_page_numbers_would_repeat_a_dataset_which_is_why_the_cursor_exists(api) -> None:  # type: ignore[no-untyped-def]
    for _ in range(4):
        f.dataset_create()
    first = [d["id"] for d in api("/api/v1/datasets/", page_size=2, page=1)["results"]]
    f.dataset_create()
    second = [d["id"] for d in api("/api/v1/datasets/", page_size=2, page=2)["results"]]
    assert set(first) & set(second)  # the shifted page repeats a row; keyset paging does not


def test_sources_keyset_pages(api) -> None:  # type: ignore[no-untyped-def]
    existing = [source_with_questions(seed=i).pk for i in range(5)]
    counter = iter(range(100, 200))
    seen = read_all(
        api,
        "/api/v1/sources/",
        cursor="before",
        next_key="next_before",
        key="id",
        insert=lambda: source_with_questions(seed=next(counter)),
        page_size=2,
    )
    assert seen == sorted(existing, reverse=True)


def test_dataset_questions_pages_are_stable_while_other_questions_arrive(api) -> None:  # type: ignore[no-untyped-def]
    dataset = es.fixture_dataset(["mmlu-pro", "arc"])
    expected = list(
        DatasetQuestion.objects.filter(dataset=dataset)
        .order_by("position")
        .values_list("question_id", flat=True)
    )
    seen: list[int] = []
    page = 1
    while True:
        body = api(f"/api/v1/datasets/{dataset.pk}/questions/", page=page, page_size=7)
        seen += [q["id"] for q in body["results"]]
        f.question_create()  # a new question elsewhere (a frozen dataset never gains one)
        es.fixture_dataset(["gpqa"], name=f"other {page}")
        if body["next"] is None:
            break
        page += 1
    assert seen == expected and body["count"] == len(expected)
