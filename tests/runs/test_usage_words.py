"""Words for unknown usage (issue 39 item 3): when a target's server sent no usage while
streaming, the report, the CLI, the run page and the comparison say so once per target, with
how many of its subject calls ended that way (counted here from the ledger) and what evidence
would make the cost known; a target whose calls carry usage says nothing of the kind."""

from __future__ import annotations

from decimal import Decimal

import pytest

from compare.services import comparison_build
from runs.interfaces.cli import report_text
from runs.ledger.accounting import NO_STREAM_USAGE_NOTE
from runs.models import Call
from runs.reporting.report import run_report
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

PHRASE = "this server reports no usage when streaming"


def no_usage(n: int, *, without: int) -> list[dict[str, object]]:
    """Call columns for n cases: the first ``without`` streams carried no usage object."""
    gone = {
        "cost_note": NO_STREAM_USAGE_NOTE,
        "input_tokens": None,
        "cached_input_tokens": None,
        "cache_write_tokens": None,
        "output_tokens": None,
        "cache_neutral_cost_usd": None,
    }
    return [gone if i < without else {} for i in range(n)]


def test_a_server_without_stream_usage_is_named_once_per_target_everywhere(client) -> None:  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": 6})
    strong, local = b.target("words-strong"), b.target("words-llama")
    baseline = b.run(qs, {strong: [True] * 6})
    candidate = b.run(
        qs,
        {local: [True, False] * 3},
        costs={local: [None] * 4 + [Decimal("0.001")] * 2},
        call_fields={local: no_usage(6, without=4)},
    )
    gone = Call.objects.filter(cell__run=candidate, cost_note=NO_STREAM_USAGE_NOTE).count()
    total = Call.objects.filter(cell__run=candidate, role="subject").count()
    assert (gone, total) == (4, 6)
    expected = f"{PHRASE}: {gone} of {total} subject calls carried no usage object"

    doc = run_report(run=candidate)
    [target] = doc["targets"]
    assert target["usage_unknown_reason"].startswith(expected)
    assert "stream_options.include_usage" in target["usage_unknown_reason"]
    assert target["subject_cost_usd"] is None  # unknown, never 0
    assert run_report(run=baseline)["targets"][0]["usage_unknown_reason"] is None

    text = report_text(doc)
    assert text.count(PHRASE) == 1 and f"usage: {expected}" in text

    client.force_login(f.user_create(username="words"))
    page = client.get(f"/runs/{candidate.pk}/?tab=results").content.decode()
    assert page.count(PHRASE) == 1 and expected in page

    compared = comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=[candidate.pk])
    [c] = compared["comparisons"]
    assert c["usage"]["usage_unknown_reason"].startswith(expected)
    assert compared["baseline"]["usage"]["usage_unknown_reason"] is None
    url = f"/compare/?baseline={baseline.pk}&candidates={candidate.pk}&compare=1"
    html = client.get(url).content.decode()
    assert html.count(PHRASE) == 1, html.count(PHRASE)


def test_a_single_models_cache_neutral_cost_unknown_for_want_of_usage_says_so() -> None:
    """Outside probe "kb": a single model whose streams carried no usage had its cache-neutral
    cost explained by "a missing or unusable usage receipt entry" only — a router's words."""
    qs = b.questions({"mmlu-pro": 4})
    local = b.target("words-local")
    run = b.run(
        qs,
        {local: [True] * 4},
        costs={local: [None] * 2 + [Decimal("0.001")] * 2},
        call_fields={local: no_usage(4, without=2)},
    )
    [target] = run_report(run=run)["targets"]
    reason = target["cache_neutral_unknown_reason"]
    assert target["cache_neutral_cost_usd"] is None
    assert reason.startswith("2 of 4 subject calls have no cache-neutral cost")
    assert "a stream without usage" in reason
