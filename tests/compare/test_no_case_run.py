"""A baseline run that plans no case is refused for that reason (outside probe): the refusal
said "run N has no single-model target with a result for every planned case" — untrue of a
single model that has every one of its zero cases — when the truth is that there is nothing to
compare."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def test_a_run_without_cases_is_refused_as_having_nothing_to_compare() -> None:
    api = APIClient()
    api.force_authenticate(f.user_create())
    base, cand = b.target("nc-base"), b.target("nc-router", kind="mom")
    empty = b.run([], {base: [], cand: []})

    answer = api.post(
        "/api/v1/compare/", {"baseline": empty.pk, "candidates": [empty.pk]}, format="json"
    )

    assert answer.status_code == 422, answer.content
    doc = answer.json()
    assert doc["code"] == "no_comparison"
    assert doc["error"] == f"run {empty.pk} plans no case: there is nothing to compare", doc
