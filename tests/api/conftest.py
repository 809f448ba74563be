"""A live API with some data in it: a token member, a target, a frozen dataset and a
finished run with calls and events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from rest_framework.authtoken.models import Token

from runs.ledger.events import events_append
from runs.models import Run
from tests import factories as f
from tests.compare import builders as b
from tests.runs import engine_support as es


@dataclass
class Seeded:
    token: str
    dataset_id: int
    run: Run
    target_slug: str

    @property
    def headers(self) -> dict[str, Any]:
        return {"Authorization": f"Token {self.token}"}


def seed() -> Seeded:
    member = f.user_create(username="api-member")
    token, _ = Token.objects.get_or_create(user=member)
    dataset = es.fixture_dataset(["mmlu-pro"])
    qs = b.questions({"mmlu-pro": 3})
    base = b.target("api-base")
    run = b.run(qs, {base: [True, False, True], b.target("api-cand"): [True, True, None]})
    # The fuzzing member owns the run, so its writes (cancel, regrade, export, …) get past the
    # owner-or-operator check and reach the views.
    Run.objects.filter(pk=run.pk).update(owner=member)
    run.owner = member
    with transaction.atomic():
        events_append(run_id=run.pk, events=[("run.created", {}), ("run.finished", {})])
    return Seeded(token=token.key, dataset_id=dataset.pk, run=run, target_slug=base.slug)


@pytest.fixture
def seeded(transactional_db: None) -> Seeded:
    return seed()
