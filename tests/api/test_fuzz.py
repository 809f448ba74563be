"""Schemathesis against a live server with a token and data (issue 7): no 5xx and no answer
that contradicts the schema, for schema-valid and schema-invalid requests alike.

Bounded for CI: a few derandomised examples per operation and generation mode, plus a few
with the ids of real objects so the fuzzer gets past the 404s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from typing import Any

import pytest
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests import factories as f
from tests.api.conftest import Seeded

pytestmark = pytest.mark.django_db(transaction=True)

# Small for CI; SRBENCH_FUZZ_EXAMPLES=50 for a deeper local run.
EXAMPLES = int(os.environ.get("SRBENCH_FUZZ_EXAMPLES", "6"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def load_schema() -> Any:
    client = Client()
    client.force_login(f.user_create())
    return schemathesis.openapi.from_dict(client.get("/api/schema/", {"format": "json"}).json())


def known_ids(path: str, seeded: Seeded) -> dict[str, Any] | None:
    """Path parameters naming real rows, for the operations whose object we seeded."""
    if re.match(r"^/api/v1/runs/\{(id|run_id)\}/", path) or path == "/api/v1/runs/{id}/":
        name = "run_id" if "{run_id}" in path else "id"
        return {name: seeded.run.pk}
    if path.startswith("/api/v1/datasets/{id}/"):
        return {"id": seeded.dataset_id}
    if path.startswith("/api/v1/targets/{slug}/"):
        return {"slug": seeded.target_slug}
    return None


def test_fuzz_the_live_api(live_server, seeded: Seeded) -> None:  # type: ignore[no-untyped-def]
    # Hundreds of deliberate 4xx answers are not news for the request log.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    schema = load_schema()
    sent = 0
    failures: list[str] = []

    def exercise(operation: Any, strategy: Any) -> None:
        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            nonlocal sent
            sent += 1
            try:
                case.call_and_validate(
                    base_url=live_server.url, headers=seeded.headers, checks=CHECKS, timeout=30
                )
            except (Exception, BaseExceptionGroup) as exc:  # collect all, report at the end
                # The check's verdict, without the (long) response body it quotes.
                text = "\n".join(
                    line for line in str(exc).splitlines() if line.strip() and len(line) < 300
                )
                failures.append(f"{operation.label}: {text[:1500]}")

        # Unsatisfiable: e.g. no invalid request exists for an operation without inputs.
        with contextlib.suppress(Unsatisfiable):
            run()

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 30
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            exercise(operation, operation.as_strategy(generation_mode=mode))
        ids = known_ids(operation.path, seeded)
        if ids:
            exercise(operation, operation.as_strategy(path_parameters=ids))
    print(f"\nschemathesis: {sent} generated requests over {len(operations)} operations")
    assert not failures, "\n\n".join(dict.fromkeys(failures))
