"""Datasets pages (R9.1–R9.6): list, dataset and question pages as a logged-in member sees
them, with every filter and page carried in the URL (no JavaScript needed)."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from datasets.models import FrozenDataset, Question, Source
from datasets.selectors import PROFILE_TOTAL_LABEL, TRAINING_EXPOSURE_WARNING
from datasets.services import dataset_compose, source_prepare
from tests.datasets.factories import source_with_questions
from tests.factories import dataset_create, user_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Client:
    c = Client()
    c.force_login(user_create())
    return c


def text_of(response: object) -> str:
    return html.unescape(response.content.decode())  # type: ignore[attr-defined]


def question_links(page: str) -> list[str]:
    return re.findall(r'href="/datasets/\d+/questions/\d+/">([^<]+)<', page)


def first_question(source: Source) -> Question:
    return source.entries.order_by("position").first().question  # type: ignore[union-attr]


def test_pages_need_a_login() -> None:
    response = Client().get("/datasets/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_list_shows_datasets_nav_and_labelled_profile_totals(client: Client) -> None:
    source = source_prepare(benchmark="gpqa", profile="smoke")
    dataset = dataset_compose(sources=[source], name="Physics and friends")
    page = text_of(client.get("/datasets/"))
    assert 'href="/datasets/" class="active">Datasets</a>' in page
    assert "Physics and friends" in page and f'href="/datasets/{dataset.pk}/"' in page
    assert PROFILE_TOTAL_LABEL in page
    assert re.search(r"<td>smoke</td><td class=\"num\">4</td><td class=\"num\">1</td>", page)


def test_list_filters_live_in_the_url(client: Client) -> None:
    smoke = dataset_compose(sources=[source_prepare(benchmark="gpqa", profile="smoke")])
    quick = dataset_compose(
        sources=[source_prepare(benchmark="simpleqa", profile="quick")], name="Trivia quick"
    )
    assert quick.name in text_of(client.get("/datasets/?profile=quick"))
    assert smoke.name not in text_of(client.get("/datasets/?profile=quick"))
    assert smoke.name in text_of(client.get("/datasets/?benchmark=gpqa"))
    assert quick.name not in text_of(client.get("/datasets/?benchmark=gpqa"))
    assert quick.name in text_of(client.get("/datasets/?q=trivia"))
    assert "No dataset matches these filters." in text_of(client.get("/datasets/?q=nothing"))
    # The filter form reflects the URL, so a reload or bookmark keeps the filters.
    page = text_of(client.get("/datasets/?profile=quick"))
    assert '<option value="quick" selected>' in page


def test_list_pagination_keeps_the_filters(client: Client) -> None:
    for n in range(30):
        dataset_create(name=f"bulk {n:02d}", profile="quick", split="dev")
    first = text_of(client.get("/datasets/?profile=quick"))
    assert "Page 1 of 2" in first
    assert 'href="?profile=quick&page=2"' in first
    second = text_of(client.get("/datasets/?profile=quick&page=2"))
    assert second.count("bulk ") == 5


def test_dataset_page_shows_coverage_subjects_warning_and_collapsed_provenance(
    client: Client,
) -> None:
    gpqa = source_prepare(benchmark="gpqa", profile="smoke")
    mmlu = source_prepare(benchmark="mmlu-pro", profile="smoke")
    dataset = dataset_compose(sources=[gpqa, mmlu])
    page = text_of(client.get(f"/datasets/{dataset.pk}/"))
    assert TRAINING_EXPOSURE_WARNING in page
    assert "must not be used for tuning" in page
    # Provenance and hashes sit in a <details> that is closed by default (R9.4).
    assert '<details id="provenance">' in page
    provenance = page.split('<details id="provenance">')[1].split("</details>")[0]
    assert dataset.identity_sha256 in provenance and gpqa.content_sha256 in provenance
    assert gpqa.provenance["origin_files"][0]["sha256"] in provenance
    assert dataset.identity_sha256 not in page.replace(provenance, "")
    coverage = page.split('id="coverage"')[1].split("</table>")[0]
    assert "mmlu-pro" in coverage and "short (never padded)" in coverage
    assert "Physics" in page.split('id="subject-groups"')[1]
    assert len(question_links(page)) == mmlu.count + gpqa.count  # 16 fit on one page


def test_dataset_questions_are_25_a_page_with_filters_and_search_in_the_url(
    client: Client,
) -> None:
    big = source_with_questions(
        benchmark="mmlu-pro",
        profile="quick",
        native_ids=[f"n{i:02d}" for i in range(30)],
        subject="physics",
    )
    other = source_with_questions(benchmark="simpleqa", profile="quick", subject="Art")
    dataset = dataset_compose(sources=[big, other])
    url = f"/datasets/{dataset.pk}/"

    first = text_of(client.get(url))
    assert len(question_links(first)) == 25 and "Page 1 of 2" in first
    second = text_of(client.get(url + "?benchmark=mmlu-pro&page=2"))
    assert question_links(second) == ["n25", "n26", "n27", "n28", "n29"]

    simpleqa_only = text_of(client.get(url + "?benchmark=simpleqa"))
    assert len(question_links(simpleqa_only)) == other.count
    by_subject = text_of(client.get(url + "?subject=Art"))
    assert len(question_links(by_subject)) == other.count
    searched = text_of(client.get(url + "?q=question+n07"))
    assert question_links(searched) == ["n07"]
    page = text_of(client.get(url + "?benchmark=mmlu-pro&q=Factory"))
    assert 'href="?benchmark=mmlu-pro&q=Factory&page=2"' in page


def test_blank_subject_renders_unknown_not_zero(client: Client) -> None:
    source = source_with_questions(benchmark="hle", profile="smoke", subject="")
    dataset = dataset_compose(sources=[source])
    page = text_of(client.get(f"/datasets/{dataset.pk}/"))
    assert "<td>unknown</td>" in page
    question = first_question(source)
    detail = text_of(client.get(f"/datasets/{dataset.pk}/questions/{question.pk}/"))
    assert '<span class="unknown">unknown</span>' in detail


def test_mcq_question_page_shows_the_task_and_lettered_options(client: Client) -> None:
    source = source_prepare(benchmark="gpqa", profile="smoke")
    dataset = dataset_compose(sources=[source])
    question = first_question(source)
    page = text_of(client.get(f"/datasets/{dataset.pk}/questions/{question.pk}/"))
    assert question.payload["question"] in page
    for letter, option in zip("ABCD", question.payload["options"], strict=True):
        assert f"<strong>{letter}.</strong> {option}" in page
    assert TRAINING_EXPOSURE_WARNING in page


def test_agent_and_code_question_pages_show_the_full_task_input(client: Client) -> None:
    def visible(key: str, question: Question) -> list[str]:
        payload = question.payload
        if key == "terminal-bench":
            files = [f["content"].strip() for f in payload["environment_files"]]
            return [payload["instruction"].strip(), *files]
        if key == "livecodebench":
            tests = [t["input"].strip() for t in payload["public_tests"]]
            return [payload["question_content"], *tests]
        if key == "scicode":
            return [s["function_header"] for s in payload["sub_steps"]]
        return [payload["policy"].strip().splitlines()[0], payload["db"]["today"]]  # tau3

    for key in ("terminal-bench", "livecodebench", "scicode", "tau3"):
        source = source_prepare(benchmark=key, profile="quick")
        dataset = dataset_compose(sources=[source])
        for entry in source.entries.select_related("question"):
            question = entry.question
            page = text_of(client.get(f"/datasets/{dataset.pk}/questions/{question.pk}/"))
            assert '<details id="full-input" open>' in page
            for expected in visible(key, question):
                assert expected in page, (key, question.native_id, expected[:60])


def test_a_question_outside_the_dataset_is_404(client: Client) -> None:
    gpqa = source_prepare(benchmark="gpqa", profile="smoke")
    arc = source_prepare(benchmark="arc", profile="smoke")
    dataset = dataset_compose(sources=[gpqa])
    outsider = first_question(arc)
    assert client.get(f"/datasets/{dataset.pk}/questions/{outsider.pk}/").status_code == 404
    assert client.get("/datasets/999999/").status_code == 404
    assert FrozenDataset.objects.count() == 1
