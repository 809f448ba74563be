"""R9.3: reference answers, hidden tests and tool credentials never leave — not through the API,
the pages, the export, the CLI listing or a log line.

Every fixture question of all nine benchmarks is prepared; each secret is turned into
"needles" (distinctive lines and values that do not occur anywhere in any public payload or
prompt), and every surface is searched for them. Needles that also occur in public text are
dropped, so a hit is a real leak and the test can fail.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from datasets.benchmarks import ADAPTERS
from datasets.models import FrozenDataset, Question, QuestionSecret, Source
from datasets.services import dataset_compose, source_prepare
from tests.factories import user_create

pytestmark = pytest.mark.django_db

MIN_NEEDLE = 8
# The chat wire's role names: τ³'s evaluation data names the "assistant" as the one who acts, and
# every page that explains the chat format says the word too — vocabulary, not a secret.
WIRE_WORDS = frozenset({"assistant", "system", "user", "tool"})
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

# Named secrets from the fixtures, one per kind of secret the spec lists: each must be absent
# from public text (checked below) for the search to prove anything.
NAMED_SECRETS = {
    "simpleqa": ["Vincent van Gogh", "The Black Sea"],  # reference answers
    "hle": ["Sum of divisor counts"],  # rationale
    "arc": ["[[1, 0, 7], [2, 0, 0], [0, 3, 3]]"],  # a test output grid
    "livecodebench": ["-2 -4 7 8 0"],  # a private test input, not among the public ones
    "scicode": ["assert np.allclose(time_of_flight(v0, theta, g), target)"],  # hidden tests
    "terminal-bench": ["echo 1 > /logs/verifier/reward.txt"],  # the verifier script
    "tau3": ["L-1 is eligible: not overdue"],  # the evaluation notes
}


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif value is not None:
        yield str(value)


def numeric_only(value: Any) -> bool:
    if isinstance(value, list):
        return all(numeric_only(v) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def needles_of(secret: Any) -> set[str]:
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.update(line.strip() for line in value.splitlines())
        elif isinstance(value, list) and value and numeric_only(value):
            # A grid (or list of grids), in the form the UI and API print lists; each grid
            # on its own too, since one leaked output grid is already a leak.
            found.add(json.dumps(value))
            for item in value:
                if isinstance(item, list) and item and all(isinstance(r, list) for r in item):
                    walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found.add(str(value))

    walk(secret)
    # A bare date could match a page's own "created" timestamp on that day: not distinctive.
    return {
        n
        for n in found
        if len(n) >= MIN_NEEDLE and not DATE.fullmatch(n) and n.lower() not in WIRE_WORDS
    }


def flatten_json(document: Any) -> str:
    return "\n".join([*strings(document), json.dumps(document, ensure_ascii=False)])


@pytest.fixture
def everything() -> dict[str, Any]:
    # quick holds every fixture question of every benchmark (the fixtures are small).
    sources = [source_prepare(benchmark=key, profile="quick") for key in ADAPTERS]
    dataset = dataset_compose(sources=sources, name="all nine")
    questions = list(Question.objects.filter(benchmark__in=list(ADAPTERS)))
    public = "\n".join(
        text
        for q in questions
        for text in [
            q.native_id,
            q.subject,
            *strings(q.payload),
            json.dumps(q.payload, ensure_ascii=False),
            *(m["content"] or "" for m in ADAPTERS[q.benchmark].messages(q.payload)),
        ]
    )
    needles: dict[str, set[str]] = {}
    for secret in QuestionSecret.objects.select_related("question"):
        benchmark = secret.question.benchmark
        distinctive = {n for n in needles_of(secret.data) if n not in public}
        needles.setdefault(benchmark, set()).update(distinctive)
    for benchmark, named in NAMED_SECRETS.items():
        needles[benchmark].update(named)
    return {
        "dataset": dataset,
        "sources": sources,
        "questions": questions,
        "public": public,
        "needles": needles,
    }


def assert_no_needle(text: str, needles: dict[str, set[str]], where: str) -> None:
    for benchmark, found in needles.items():
        for needle in found:
            assert needle not in text, f"{benchmark} secret {needle!r} leaked in {where}"


def test_the_needles_are_distinctive_and_would_be_found(everything: dict[str, Any]) -> None:
    for named in NAMED_SECRETS.values():
        for secret in named:
            assert secret not in everything["public"], f"{secret!r} is public text"
    # Every benchmark whose secret is more than an option letter contributes needles.
    for benchmark in set(ADAPTERS) - {"mmlu-pro", "gpqa"}:
        assert len(everything["needles"][benchmark]) >= 2, benchmark
    # A deliberately leaky rendering of the secrets is caught: the search can fail.
    leak = flatten_json([s.data for s in QuestionSecret.objects.all()])
    with pytest.raises(AssertionError, match="leaked"):
        assert_no_needle(leak, everything["needles"], "a leaky rendering")


def test_no_api_payload_contains_a_secret(everything: dict[str, Any]) -> None:
    client = Client()
    client.force_login(user_create())
    dataset: FrozenDataset = everything["dataset"]
    needles = everything["needles"]

    urls = [
        "/api/v1/sources/?page_size=100",
        "/api/v1/datasets/",
        f"/api/v1/datasets/{dataset.pk}/",
        "/api/v1/datasets/totals/",
        *(f"/api/v1/sources/{s.pk}/" for s in everything["sources"]),
        *(f"/api/v1/questions/{q.pk}/" for q in everything["questions"]),
    ]
    page_url: str | None = f"/api/v1/datasets/{dataset.pk}/questions/?page_size=100"
    seen = 0
    while page_url:
        body = client.get(page_url).json()
        seen += len(body["results"])
        assert_no_needle(flatten_json(body), needles, page_url)
        page_url = body["next"]
    assert seen == len(everything["questions"])
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert_no_needle(flatten_json(response.json()), needles, url)

    # Option letters are too short to search for; instead, a question's API shape is exactly
    # its public fields, so no answer key can ride along.
    for question in everything["questions"]:
        body = client.get(f"/api/v1/questions/{question.pk}/").json()
        assert set(body) == {
            "id",
            "benchmark",
            "kind",
            "native_id",
            "subject",
            "position",
            "payload",
        }
        assert body["payload"] == question.payload

    export = client.get(f"/api/v1/datasets/{dataset.pk}/export/")
    lines = b"".join(export.streaming_content).decode().splitlines()
    assert len(lines) == len(everything["questions"])
    assert_no_needle(flatten_json([json.loads(line) for line in lines]), needles, "export")


def test_no_page_contains_a_secret(everything: dict[str, Any]) -> None:
    client = Client()
    client.force_login(user_create())
    dataset: FrozenDataset = everything["dataset"]
    needles = everything["needles"]

    pages = ["/datasets/", f"/datasets/{dataset.pk}/"]
    pages += [f"/datasets/{dataset.pk}/?page={n}" for n in (2, 3)]
    pages += [f"/datasets/{dataset.pk}/questions/{q.pk}/" for q in everything["questions"]]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        assert_no_needle(html.unescape(response.content.decode()), needles, url)


def test_no_cli_listing_or_log_line_contains_a_secret(
    everything: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    source_prepare(benchmark="terminal-bench", profile="quick")  # the no-op path logs too
    call_command("benchmark", "datasets", "--json")
    call_command("benchmark", "datasets")
    out = capsys.readouterr().out
    assert_no_needle(out, everything["needles"], "benchmark datasets")
    assert_no_needle(caplog.text, everything["needles"], "logs")
    assert Source.objects.count() == len(ADAPTERS)
