"""The datasets REST API: authentication, filters, pagination bounds, compose, export, schema."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.test import Client

from datasets.models import FrozenDataset, Source
from datasets.selectors import PROFILE_TOTAL_LABEL
from datasets.services import dataset_compose, source_prepare
from tests.datasets.factories import source_with_questions
from tests.factories import user_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Client:
    c = Client()
    c.force_login(user_create())
    return c


@pytest.fixture
def smoke() -> dict[str, Source]:
    return {k: source_prepare(benchmark=k, profile="smoke") for k in ("simpleqa", "gpqa", "arc")}


@pytest.mark.parametrize(
    "url",
    ["/api/v1/sources/", "/api/v1/datasets/", "/api/v1/datasets/totals/", "/api/schema/"],
)
def test_anonymous_clients_are_refused(url: str) -> None:
    response = Client().get(url)
    assert response.status_code in (401, 403)


def test_anonymous_compose_is_refused_and_writes_nothing(smoke: dict[str, Source]) -> None:
    response = Client().post(
        "/api/v1/datasets/compose/",
        {"sources": [smoke["gpqa"].pk]},
        content_type="application/json",
    )
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert not FrozenDataset.objects.exists()


def test_sources_list_filters_and_shows_short_and_provenance(
    client: Client, smoke: dict[str, Source]
) -> None:
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    body = client.get("/api/v1/sources/?benchmark=mmlu-pro").json()
    [row] = body["results"]
    assert (row["count"], row["requested_count"], row["short"]) == (12, 14, True)
    assert row["provenance"]["origin_files"][0]["sha256"]
    assert client.get("/api/v1/sources/?profile=quick").json()["count"] == 0
    bad = client.get("/api/v1/sources/?profile=huge")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid"
    # "²" is a digit to str.isdigit but int() refuses it, and "--5" was read as a number by
    # the old check: both a clear 400, not a server error.
    for seed in ("%C2%B2", "--5", "%D9%A3"):
        bad = client.get(f"/api/v1/sources/?seed={seed}")
        assert bad.status_code == 400 and bad.json()["code"] == "invalid", seed
    assert client.get("/api/v1/sources/?seed=-5").status_code == 200


def test_a_member_sees_the_name_of_the_path_read_staff_the_whole_path(
    client: Client, smoke: dict[str, Source]
) -> None:
    """The server's path is a deployment detail (an outside probe saw it in every member's
    `GET /api/v1/sources/ID/`): a member reads its last name, staff the whole path, on the
    source, the sources list and a dataset's sources alike."""
    source = smoke["gpqa"]
    whole = source.provenance["source_path"]
    assert "/" in whole
    dataset = dataset_compose(sources=[source])
    staff = Client()
    staff.force_login(user_create(username="ops", staff=True))
    for reader, expected in ((client, whole.rsplit("/", 1)[-1]), (staff, whole)):
        seen = [
            reader.get(f"/api/v1/sources/{source.pk}/").json(),
            *reader.get("/api/v1/sources/?benchmark=gpqa").json()["results"],
            *reader.get(f"/api/v1/datasets/{dataset.pk}/").json()["sources"],
        ]
        assert [s["provenance"]["source_path"] for s in seen] == [expected] * 3


def test_dataset_list_searches_and_filters(client: Client, smoke: dict[str, Source]) -> None:
    pair = dataset_compose(sources=[smoke["simpleqa"], smoke["gpqa"]], name="Pair of two")
    only_arc = dataset_compose(sources=[smoke["arc"]], name="Grids")

    def ids(query: str) -> list[int]:
        return [row["id"] for row in client.get(f"/api/v1/datasets/{query}").json()["results"]]

    assert ids("?q=pair") == [pair.pk]
    assert ids(f"?q={only_arc.identity_sha256[:10]}") == [only_arc.pk]
    assert ids("?benchmark=gpqa") == [pair.pk]
    assert set(ids("?profile=smoke")) == {pair.pk, only_arc.pk}
    assert ids("?profile=standard") == []


def test_dataset_detail_shows_coverage_and_subject_groups(
    client: Client, smoke: dict[str, Source]
) -> None:
    dataset = dataset_compose(sources=[smoke["simpleqa"], smoke["gpqa"]])
    body = client.get(f"/api/v1/datasets/{dataset.pk}/").json()
    assert body["question_count"] == smoke["simpleqa"].count + smoke["gpqa"].count
    assert [c["benchmark"] for c in body["coverage"]] == ["simpleqa", "gpqa"]
    assert body["coverage"][1] == {
        "benchmark": "gpqa",
        "kind": "mcq",
        "count": 4,
        "requested_count": 4,
        "short": False,
        "synthetic": False,
        "source_id": smoke["gpqa"].pk,
    }
    assert {g["benchmark"] for g in body["subject_groups"]} == {"simpleqa", "gpqa"}
    assert sum(g["count"] for g in body["subject_groups"]) == body["question_count"]


def test_question_pages_are_bounded_to_100_per_read(client: Client) -> None:
    big = source_with_questions(
        benchmark="mmlu-pro", profile="quick", native_ids=[f"n{i:03d}" for i in range(130)]
    )
    dataset = dataset_compose(sources=[big])
    url = f"/api/v1/datasets/{dataset.pk}/questions/"
    default = client.get(url).json()
    assert len(default["results"]) == 25 and default["count"] == 130
    capped = client.get(url + "?page_size=1000").json()
    assert len(capped["results"]) == 100 and capped["next"]
    last = client.get(url + "?page_size=100&page=2").json()
    assert len(last["results"]) == 30 and last["next"] is None
    assert [r["position"] for r in last["results"]] == list(range(100, 130))
    assert client.get(url + "?page=99").status_code == 404


def test_questions_filter_by_benchmark_subject_and_text(
    client: Client, smoke: dict[str, Source]
) -> None:
    dataset = dataset_compose(sources=list(smoke.values()))
    url = f"/api/v1/datasets/{dataset.pk}/questions/"
    gpqa = client.get(url + "?benchmark=gpqa").json()["results"]
    assert gpqa and {r["benchmark"] for r in gpqa} == {"gpqa"}
    subject = gpqa[0]["subject"]
    by_subject = client.get(url, {"subject": subject}).json()["results"]
    assert by_subject and {r["subject"] for r in by_subject} == {subject}
    found = client.get(url, {"q": "infinite square well"}).json()["results"]
    assert [r["native_id"] for r in found] == ["fixture-gpqa-phys-01"]


def test_text_search_never_matches_a_reference_answer(
    client: Client, smoke: dict[str, Source]
) -> None:
    # "Vincent van Gogh" is the SimpleQA fixture's reference answer, absent from its question.
    dataset = dataset_compose(sources=[smoke["simpleqa"]])
    found = client.get(f"/api/v1/datasets/{dataset.pk}/questions/", {"q": "van Gogh"}).json()
    assert found["count"] == 0


def test_compose_creates_then_reuses_with_a_zero_model_request_receipt(
    client: Client, smoke: dict[str, Source]
) -> None:
    payload = {"sources": [smoke["gpqa"].pk, smoke["arc"].pk], "name": "mcq and grid"}
    created = client.post("/api/v1/datasets/compose/", payload, content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    assert body["created"] is True and body["model_requests"] == 0
    assert body["dataset"]["name"] == "mcq and grid"
    assert [c["benchmark"] for c in body["dataset"]["coverage"]] == ["gpqa", "arc"]
    again = client.post("/api/v1/datasets/compose/", payload, content_type="application/json")
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["dataset"]["id"] == body["dataset"]["id"]
    assert FrozenDataset.objects.count() == 1


def test_compose_conflict_is_409_with_every_conflict(client: Client) -> None:
    a = source_prepare(benchmark="simpleqa", profile="smoke", seed=1)
    b = source_prepare(benchmark="gpqa", profile="quick", seed=2)
    response = client.post(
        "/api/v1/datasets/compose/",
        {"sources": [a.pk, b.pk]},
        content_type="application/json",
    )
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "composition_conflict"
    assert {c["kind"] for c in body["detail"]["conflicts"]} == {
        "profile_mismatch",
        "seed_mismatch",
    }
    assert not FrozenDataset.objects.exists()


@pytest.mark.parametrize(
    "payload",
    [{}, {"sources": []}, {"sources": [999999]}, {"sources": ["x"]}],
)
def test_compose_validation_errors_are_400(client: Client, payload: dict) -> None:
    response = client.post("/api/v1/datasets/compose/", payload, content_type="application/json")
    assert response.status_code == 400
    assert set(response.json()) == {"error", "code", "detail"}


def test_compose_of_a_benchmark_no_source_holds_is_400(
    client: Client, smoke: dict[str, Source]
) -> None:
    response = client.post(
        "/api/v1/datasets/compose/",
        {"sources": [smoke["gpqa"].pk], "benchmarks": ["hle"]},
        content_type="application/json",
    )
    assert response.status_code == 400 and "hle" in response.json()["error"]


def test_members_cannot_change_datasets_through_the_api(
    client: Client, smoke: dict[str, Source]
) -> None:
    dataset = dataset_compose(sources=[smoke["gpqa"]])
    url = f"/api/v1/datasets/{dataset.pk}/"
    assert client.delete(url).status_code == 405
    assert client.patch(url, {"name": "x"}, content_type="application/json").status_code == 405
    assert client.post("/api/v1/sources/", {}, content_type="application/json").status_code == 405


def test_export_streams_public_questions_as_json_lines(
    client: Client, smoke: dict[str, Source]
) -> None:
    dataset = dataset_compose(sources=[smoke["simpleqa"], smoke["gpqa"]])
    response = client.get(f"/api/v1/datasets/{dataset.pk}/export/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert len(lines) == smoke["simpleqa"].count + smoke["gpqa"].count
    assert [row["position"] for row in lines] == list(range(len(lines)))
    assert set(lines[0]) == {"position", "benchmark", "native_id", "subject", "payload"}


def test_question_detail_is_the_public_payload(client: Client, smoke: dict[str, Source]) -> None:
    question = smoke["gpqa"].entries.order_by("position").first().question  # type: ignore[union-attr]
    body = client.get(f"/api/v1/questions/{question.pk}/").json()
    assert set(body) == {"id", "benchmark", "kind", "native_id", "subject", "position", "payload"}
    assert body["payload"] == question.payload and body["kind"] == "mcq"


def test_profile_totals_carry_the_r9_6_label(client: Client, smoke: dict[str, Source]) -> None:
    totals = {t["profile"]: t for t in client.get("/api/v1/datasets/totals/").json()}
    assert totals["smoke"]["total"] == sum(s.count for s in smoke.values())
    assert totals["smoke"]["sources"] == 3
    assert totals["quick"]["total"] == 0
    assert all(t["label"] == PROFILE_TOTAL_LABEL for t in totals.values())


def test_openapi_schema_builds_for_a_logged_in_user(client: Client) -> None:
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = response.content.decode()
    for path in ("/api/v1/datasets/compose/", "/api/v1/datasets/{id}/questions/"):
        assert path in schema


def test_schema_generation_has_no_warnings_for_the_datasets_views(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    call_command("spectacular", "--file", f"{tmp_path}/schema.yaml", "--validate")
    err = capsys.readouterr().err
    noisy = [line for line in err.splitlines() if "datasets" in line.lower()]
    assert noisy == []
