"""Security scan (issue 13 point 3): every registered URL pattern — dashboard, API and admin —
is requested as a logged-in member with real data present, and no response may contain a
target secret (a stored API key), a reference answer (SimpleQA, HLE), a hidden test
(LiveCodeBench private tests, SciCode tests, Terminal-Bench verifier lines) or a tool
credential (τ³ evaluation data).

Real data: all nine benchmarks' fixture sources prepared and composed; a finished run over
SimpleQA, HLE, ARC, LiveCodeBench and MMLU-Pro driven against the simulator (subject and judge
calls, evidence, events); a target whose API key is stored (and sent with every request).
The scan fails when a pattern is registered that it did not visit (`test_every_pattern_...`).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import threading
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from datasets.benchmarks import ADAPTERS
from datasets.models import Question, Source
from datasets.services import dataset_compose, source_prepare
from runs.engine.driver import drive
from runs.models import Call, Cell, Run, Target
from runs.planning.services import run_create, target_set_api_key
from tests import factories as f
from tests.datasets.test_no_secret_leak import NAMED_SECRETS, flatten_json, needles_of, strings
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db(transaction=True)

API_KEY = "sk-srbench-SECRET-7f3a9c2e-do-not-leak"
RUN_BENCHMARKS = ["simpleqa", "hle", "arc", "scicode", "mmlu-pro"]
FORMAT_SUFFIX = re.compile(r"\(\?P<format>|<drf_format_suffix:format>")
PARAM = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>|\(\?P<(?P<rname>\w+)>[^)]*\)")
FANOUT = 400
BY_NAME = {
    "run_id": "runs",
    "call_id": "calls",
    "cell_id": "cells",
    "question_id": "questions",
}  # at most this many concrete URLs per pattern


def registered_patterns(patterns=None, prefix: str = "") -> list[tuple[str, Any]]:
    """Every URL pattern as (full route, pattern), DRF's format-suffix twins left out (they
    route to the same views as the plain pattern, which is visited)."""
    out = []
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        route = prefix + str(p.pattern).lstrip("^").rstrip("$").replace("\\Z", "")
        if FORMAT_SUFFIX.search(route):
            continue
        if isinstance(p, URLResolver):
            out += registered_patterns(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            out.append((route, p))
    return out


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(
        "runs.planning.services.run_dispatch", lambda *, run_id: None
    )  # driven below
    sources = [source_prepare(benchmark=key, profile="quick") for key in ADAPTERS]
    dataset = dataset_compose(sources=sources, name="all nine")
    with es.simulator(
        RUN_BENCHMARKS, models={"sim-strong": {"accuracy": 0.0}}
    ) as url:  # wrong answers only: no model output can echo a reference answer
        targets = es.sim_targets(url)
        target_set_api_key(target=targets["strong"], api_key=API_KEY)
        run_dataset = es.fixture_dataset(RUN_BENCHMARKS, name="scan")
        owner = f.user_create(username="owner")
        run, _ = run_create(
            owner=owner,
            plan={
                "name": "scan",
                "dataset": run_dataset.pk,
                "targets": ["sim-strong"],
                "judges": {"simpleqa": "sim-judge", "hle": "sim-judge"},
                "limits": {"concurrency": 8},
            },
        )
        # In a thread of its own, as in a worker: the driver's database thread must not
        # inherit this thread's connection.
        driver = threading.Thread(target=lambda: asyncio.run(drive(run.pk)))
        driver.start()
        driver.join(timeout=240)
    run.refresh_from_db()
    assert run.status in ("completed", "failed"), run.stop_reason
    assert Call.objects.filter(cell__run=run, role="judge", status="completed").exists()

    public = "\n".join(
        text
        for q in Question.objects.all()
        for text in [
            q.native_id,
            q.subject,
            *strings(q.payload),
            json.dumps(q.payload, ensure_ascii=False),
        ]
    )
    # What the (always wrong) model wrote is its own answer, shown by design: not a secret.
    # So is what was sent to it (the public prompt, its earlier turns): only judge requests
    # carry a reference answer.
    outputs = "\n".join(
        [c or "" for c in Call.objects.filter(role="subject").values_list("content", flat=True)]
        + [
            json.dumps(r, ensure_ascii=False)
            for r in Call.objects.filter(role="subject").values_list("request", flat=True)
        ]
    )
    needles: dict[str, set[str]] = {"target api key": {API_KEY, API_KEY[8:30]}}
    from datasets.models import QuestionSecret

    for secret in QuestionSecret.objects.select_related("question"):
        found = {n for n in needles_of(secret.data) if n not in public and n not in outputs}
        needles.setdefault(secret.question.benchmark, set()).update(found)
    for benchmark, named in NAMED_SECRETS.items():
        # The simulated LiveCodeBench "model" is an oracle: its program embeds the hidden test
        # inputs. Text a model wrote is shown by design, so such needles are dropped here too.
        needles[benchmark].update(n for n in named if n not in outputs)
    return {"run": run, "dataset": dataset, "sources": sources, "needles": needles}


def concrete_urls(route: str, values: dict[str, list[str]]) -> list[str]:
    """The route with each parameter filled by real ids, chosen by the path segment before it
    (runs → run ids, calls → that run's call ids, …); "1" where there is no such data."""
    choices: list[list[str]] = []
    pos = 0
    for m in PARAM.finditer(route):
        choices.append([route[pos : m.start()]])
        before = [s for s in PARAM.sub("", route[: m.start()]).split("/") if s]
        name = m.group("name") or m.group("rname")
        owner = BY_NAME.get(name) or (before[-1] if before else "")
        choices.append(values.get(owner, ["1"]))
        pos = m.end()
    choices.append([route[pos:]])
    urls = []
    for parts in itertools.islice(itertools.product(*choices), FANOUT):
        url = "/" + "".join(parts).replace("\\.", ".").replace("/?", "/")
        urls.append(re.sub(r"/+", "/", url))
    return urls


def body_text(response: Any) -> str:
    if getattr(response, "streaming", False):
        raw = b"".join(response.streaming_content)
    else:
        raw = response.content
    text = raw.decode("utf-8", "replace")
    if response.get("Content-Type", "").startswith("application/json"):
        try:
            return flatten_json(json.loads(text)) + "\n" + text
        except ValueError:
            return text
    return html.unescape(text)


def leaks(text: str, needles: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [(kind, n) for kind, found in needles.items() for n in found if n in text]


def test_every_pattern_is_crawled_as_a_member_and_no_secret_appears(world: dict[str, Any]) -> None:
    run: Run = world["run"]
    dataset = world["dataset"]
    values = {
        "runs": [str(run.pk)],
        "calls": [
            str(pk) for pk in Call.objects.filter(cell__run=run).values_list("pk", flat=True)
        ],
        "datasets": [str(dataset.pk)],
        "questions": [
            str(pk)
            for pk in Question.objects.filter(
                pk__in=list(Cell.objects.filter(run=run).values_list("question_id", flat=True))
                + list(dataset.entries.values_list("question_id", flat=True))
            ).values_list("pk", flat=True)
        ],
        "cells": [str(pk) for pk in Cell.objects.filter(run=run).values_list("pk", flat=True)],
        "sources": [str(s.pk) for s in world["sources"]],
        "targets": list(Target.objects.values_list("slug", flat=True)),
        "recipes": ["1"],
    }
    extra = {  # query variants that select other content on the same pattern
        "runs/<int:run_id>/": [f"?tab={t}" for t in ("questions", "calls", "evidence", "recipe")]
        + ["?tab=calls&role=judge", "?tab=evidence&read=more"],
        "api/v1/runs/": ["?limit=100"],
    }
    client = Client()
    client.force_login(f.user_create(username="member"))
    registered = registered_patterns()
    visited: set[str] = set()
    found: list[tuple[str, int, str, str]] = []
    statuses: dict[str, int] = {}
    requests = 0
    for route, _pattern in registered:
        urls = concrete_urls(route, values)
        for suffix in extra.get(route, []):
            urls += [u + suffix for u in urls[:1]]
        for url in urls:
            response = client.get(url, follow=False)
            requests += 1
            statuses[url] = response.status_code
            for kind, needle in leaks(body_text(response), world["needles"]):
                found.append((url, response.status_code, kind, needle))
        visited.add(route)
    # The run's paged lists followed to the end (a secret on page 2 is still a leak).
    for start in (
        f"/api/v1/runs/{run.pk}/calls/?limit=100",
        f"/api/v1/runs/{run.pk}/events/?limit=1000",
        f"/api/v1/runs/{run.pk}/results/?limit=100",
    ):
        response = client.get(start)
        requests += 1
        for kind, needle in leaks(body_text(response), world["needles"]):
            found.append((start, response.status_code, kind, needle))
    print(
        f"secret scan: {len(visited)} patterns, {requests} requests, "
        f"{sum(len(v) for v in world['needles'].values())} needles, {len(found)} leaks"
    )
    assert {r for r, _ in registered} == visited
    assert not any(s >= 500 for s in statuses.values()), {
        u: s for u, s in statuses.items() if s >= 500
    }
    # The crawl really saw the data: the member can read the run, its calls and the questions.
    assert statuses[f"/api/v1/runs/{run.pk}/report/"] == 200
    assert statuses[f"/runs/{run.pk}/"] == 200
    assert sum(1 for u, s in statuses.items() if "/calls/" in u and s == 200) >= 10
    assert not found, "\n".join(f"{u} [{s}]: {k} {n!r}" for u, s, k, n in found[:40])


def test_the_scan_would_find_a_leak(world: dict[str, Any]) -> None:
    """Not vacuous: every kind of needle is present and a rendering of the secrets is caught."""
    from datasets.models import QuestionSecret

    needles = world["needles"]
    for kind in (
        "target api key",
        "simpleqa",
        "hle",
        "livecodebench",
        "scicode",
        "terminal-bench",
        "tau3",
    ):
        assert needles.get(kind), kind
    rendering = flatten_json([s.data for s in QuestionSecret.objects.all()]) + API_KEY
    caught = {kind for kind, _ in leaks(rendering, needles)}
    assert {
        "target api key",
        "simpleqa",
        "hle",
        "livecodebench",
        "terminal-bench",
        "tau3",
    } <= caught
    assert Source.objects.count() == len(ADAPTERS)
