"""A Create evaluation link naming a dataset that does not exist says so (outside probe "ka",
2026-12-07). `/runs/new/?dataset=999` (a stale "Evaluate" link, a typo) opened the default
profile's form without a word, as if the dataset had been found; the page still renders (its
URL is its state) and now says which dataset it could not find and what it shows instead."""

from __future__ import annotations

import html
import re

import pytest

from tests import factories as f
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("given", ["999999", "abc"])
def test_a_missing_dataset_is_named_on_the_form(client, given):
    es.fixture_dataset(["mmlu-pro"], name="some data")
    client.force_login(f.user_create())
    response = client.get(f"/runs/new/?dataset={given}")
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert f"No frozen dataset “{given}”" in page


def test_a_found_dataset_says_nothing_of_the_kind(client):
    dataset = es.fixture_dataset(["mmlu-pro"], name="some data")
    client.force_login(f.user_create())
    page = html.unescape(client.get(f"/runs/new/?dataset={dataset.pk}").content.decode())
    words = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert "No frozen dataset" not in words and "From dataset some data" in words
