"""Words on the Create evaluation pages (outside probe, session 5): the review page's sentences
start with a capital letter, its dataset line does not say the profile and seed twice (the
dataset's own name already does), and a required field left empty is refused in our words,
naming the field, not Django's "This field is required."."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from datasets.services import source_prepare
from tests import factories as f
from tests.runs.test_create_form import summary_items
from tests.runs.test_form_select_all import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    user = f.user_create(username="alice")
    client.force_login(user)
    return user


def text_of(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def test_the_review_page_words_start_sentences_and_say_each_fact_once(client, member):
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    page = client.post("/runs/new/", form_data(benchmarks=["mmlu-pro"])).content.decode()
    assert 'id="plan-hash"' in page

    worst = text_of(re.search(r'<p id="worst-case">(.*?)</p>', page, re.S).group(1))
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", worst) if s]
    assert len(sentences) >= 2, worst
    assert all(s[0].isupper() for s in sentences), sentences

    dataset = text_of(re.search(r"<dt>Dataset</dt><dd>(.*?)</dd>", page, re.S).group(1))
    assert dataset.count("seed ") == 1, dataset
    assert dataset.count("smoke") == 1, dataset
    assert "dev" in dataset and "identity" in dataset


def test_an_empty_required_field_is_refused_in_words_that_name_it(client, member):
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    data = form_data(benchmarks=["mmlu-pro"], name="", targets=[], concurrency="")
    page = client.post("/runs/new/", data).content.decode()
    assert "This field is required" not in page
    items = dict(summary_items(page))
    assert items["id_name"] == "Name: Give the evaluation a name."
    assert items["target-sim-strong"] == "Targets: Tick at least one target."
    assert items["id_concurrency"] == "Concurrency: Enter the concurrency."
