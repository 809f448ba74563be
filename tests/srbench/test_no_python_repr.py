"""No page shows a Python repr (issue 23; SPEC R7 dashboard, R10 run detail, R13 results, R14
evidence, R8 Create evaluation and its review, R9 datasets, R5 compare).

A completed run is driven by the real engine against the simulator (so its evidence holds
real request, SSE and usage payloads; τ³ brings user-simulator calls, simpleqa judge calls),
then every main page is rendered through the test client and its text (HTML entities
decoded, since `'` is escaped as `&#x27;`) is searched for what a Python repr looks like:
`{'`, `[{'`, `Decimal('`, `<… object at 0x…>`. A dict passed to a template as is, a context
variable colliding with Django's own (`messages`), or `str()` of a payload all fail here.
The review page also names every limit in words with its unit, never a raw plan key.
"""

from __future__ import annotations

import html
import re
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from runs.models import Call, Cell, Run
from runs.planning.plans import LimitsSerializer
from runs.planning.services import run_create
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import wait_until
from tests.runs import engine_support as es

BENCHMARKS = ["mmlu-pro", "simpleqa", "tau3"]
REPR = re.compile(r"\[?\{'|Decimal\('|<[^<>]* object at 0x[0-9a-f]+>|\bdatetime\.datetime\(")


def repr_found(text: str) -> list[str]:
    """The Python-repr-looking snippets of a page's decoded text, with some context."""
    decoded = html.unescape(text)
    return [decoded[max(0, m.start() - 40) : m.end() + 40] for m in REPR.finditer(decoded)]


def test_the_pattern_catches_what_a_template_makes_of_python_objects():
    """The check itself can fail: a dict, a list of dicts, a Decimal and an object rendered
    by a template (then escaped) are all found; JSON and prose are not."""
    from django.template import Context, Template

    rendered = Template("{{ a }} {{ b }} {{ c }} {{ d }}").render(
        Context({"a": {"role": "user"}, "b": [{"k": 1}], "c": [Decimal("1.5")], "d": object()})
    )
    assert len(repr_found(rendered)) == 4, rendered
    assert repr_found('{"role": "user"} it\'s [1, 2] {x}') == []


def test_evidence_text_is_pretty_printed_and_an_sse_stream_is_one_event_per_line():
    """R14: the Evidence filter indents JSON and splits an SSE stream into one event a line."""
    from srbench.templatetags.pretty import pretty

    stream = 'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n'
    assert pretty(stream) == 'data: {"a": 1}\ndata: {"b": 2}\ndata: [DONE]'
    shown = pretty({"usage": {"input": 3}, "raw": stream, "cost": Decimal("0.10")})
    assert '"usage": {\n    "input": 3\n  }' in shown
    assert '"data: {\\"b\\": 2}",' in shown  # the stream became a list, one event a line
    assert '"cost": "0.10"' in shown
    assert repr_found(shown) == []


def _pages_of_a_completed_run(run: Run) -> dict[str, str]:
    pages = {
        "runs list": reverse("runs:list"),
        "targets": reverse("runs:targets"),
        "datasets": reverse("datasets:list"),
        "dataset": reverse("datasets:detail", args=[run.dataset_id]),
        "create evaluation": f"{reverse('runs:new')}?dataset={run.dataset_id}",
        "recovery": reverse("runs:recovery", args=[run.pk]),
    }
    for tab in ("results", "questions", "calls", "evidence", "recipe"):
        pages[f"run {tab}"] = f"{reverse('runs:detail', args=[run.pk])}?tab={tab}"
    for question_id in run.dataset.questions.values_list("pk", flat=True):
        pages[f"dataset question {question_id}"] = reverse(
            "datasets:question", args=[run.dataset_id, question_id]
        )
    for cell in Cell.objects.filter(run=run):
        pages[f"run question {cell.pk}"] = reverse("runs:question", args=[run.pk, cell.pk])
    calls = Call.objects.filter(cell__run=run).order_by("pk")
    chosen = [
        *calls.filter(tool_calls__isnull=False)[:3],
        *(c for role in ("subject", "judge", "simulator") for c in calls.filter(role=role)[:3]),
    ]
    assert any(c.tool_calls for c in chosen), "a τ³ call with tool calls is rendered"
    for call in chosen:
        pages[f"{call.role} call {call.pk}"] = reverse("runs:call", args=[run.pk, call.pk])
        pages[f"{call.role} call {call.pk} in tab"] = (
            f"{reverse('runs:detail', args=[run.pk])}?tab=calls&call={call.pk}"
        )
    return pages


@pytest.mark.worker
def test_no_page_of_a_completed_run_shows_a_python_repr(celery_worker):
    with es.simulator(BENCHMARKS) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS, per_benchmark=2)
        owner = f.user_create(username="owner")
        run, _ = run_create(
            owner=owner,
            plan={
                "name": "repr check",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-router"],
                "judges": {"simpleqa": "sim-judge"},
                "simulators": {"tau3": "sim-user"},
                "limits": {"concurrency": 4},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=180)
    run.refresh_from_db()
    assert run.status == "completed", run.stop_reason
    assert Call.objects.filter(cell__run=run, role="simulator").exists()
    assert Call.objects.filter(cell__run=run, role="judge").exists()

    client = Client()
    client.force_login(owner)
    pages = _pages_of_a_completed_run(run)
    # Step 1 and the results of Compare iterations, between two runs built with factories.
    qs = b.questions({"mmlu-pro": 3})
    base, cand = b.target("base-a"), b.target("cand-b")
    baseline = b.run(qs, {base: [True, True, False]}, costs={base: Decimal("0.01")})
    candidate = b.run(qs, {cand: [True, False, False]}, costs={cand: Decimal("0.002")})
    pages["compare"] = reverse("compare:index")
    pages["compare candidates"] = f"{reverse('compare:index')}?baseline={baseline.pk}"
    pages["compare results"] = (
        f"{reverse('compare:index')}?baseline={baseline.pk}&candidates={candidate.pk}&compare=1"
    )

    problems = {}
    for name, address in pages.items():
        response = client.get(address)
        assert response.status_code == 200, (name, address, response.status_code)
        found = repr_found(response.content.decode())
        if found:
            problems[name] = found[:3]
    # The Evidence tab pretty-prints: JSON indented, an SSE stream one event per line.
    evidence = client.get(pages["run evidence"]).content.decode()
    assert "<pre" in evidence, "event payloads are shown as indented JSON"

    # The review page of a plan like this run's (Create evaluation → Review plan).
    review = client.post(
        reverse("runs:new"),
        {
            "action": "review",
            "dataset": dataset.pk,
            "profile": "smoke",
            "seed": dataset.seed,
            "name": "review check",
            "benchmarks": BENCHMARKS,
            "targets": ["sim-strong"],
            "judge_simpleqa": "sim-judge",
            "simulator_tau3": "sim-user",
            "failure_policy": "stop",
            "slots": 1,
            **{
                name: LimitsSerializer().fields[name].default
                for name in (
                    "total_timeout_s",
                    "idle_timeout_s",
                    "max_output_tokens",
                    "max_output_chars",
                    "concurrency",
                    "max_calls_per_case",
                    "case_timeout_s",
                    "max_run_seconds",
                )
            },
        },
    )
    text = review.content.decode()
    assert 'id="plan-hash"' in text, text[:3000]
    found = repr_found(text)
    if found:
        problems["review plan"] = found[:3]
    limits = re.search(r'id="plan-limits".*?</table>', text, re.S)
    assert limits is not None
    limits_text = html.unescape(limits.group(0))
    for key in LimitsSerializer().fields:
        assert f">{key}<" not in limits_text, f"limit {key} shown as its raw key"
    for words in ("Request timeout", "seconds", "Concurrency", "Max cost"):
        assert words in limits_text, (words, limits_text)
    assert problems == {}, problems
