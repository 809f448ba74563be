"""Compare iterations in a real browser (issue 9 acceptance): choose a baseline, search, Select
all across pages, compare, change one candidate (results hide), compare again, change the
baseline (candidates cleared), reload the link (same comparison), and download the CSV and
JSON exports, whose rows must equal POST /api/v1/compare/. Runs are constructed in the
database (no worker): the page only reads saved results."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from compare.forms import ids_parse
from runs.models import Run
from tests.compare import builders as b
from tests.e2e.conftest import screenshot

pytestmark = pytest.mark.e2e

OUT = [True, False, True, False]
ITERATIONS = 30  # more than one page of 25 candidates and of 25 result cards


def named(run: Run, name: str) -> Run:
    Run.objects.filter(pk=run.pk).update(name=name)
    run.name = name
    return run


def params(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def card_ids(page) -> list[str]:
    return page.locator("#cards article.result-card").evaluate_all("els => els.map(e => e.id)")


def test_compare_iterations_from_baseline_to_exports(logged_in_page, live_server, member):
    page = logged_in_page
    qs = b.questions({"mmlu-pro": 4})
    base_a, base_b = b.target("base-a"), b.target("base-b")
    alpha = named(b.run(qs, {base_a: OUT}, costs={base_a: Decimal("0.01")}), "baseline-alpha")
    beta = named(b.run(qs, {base_b: OUT}, costs={base_b: Decimal("0.01")}), "baseline-beta")
    router = b.target("router", kind="mom")
    iterations = [
        named(
            b.run(
                qs,
                {router: [True, True, i % 2 == 0, i % 3 == 0]},
                # Every fifth iteration has one unknown cost: its savings must stay unknown.
                costs={router: [Decimal("0.004")] * 3 + [None if i % 5 == 0 else Decimal("0.002")]},
            ),
            f"iter-{i:02d}",
        )
        for i in range(ITERATIONS)
    ]
    others = [named(b.run(qs, {router: OUT}), f"other-{i}") for i in range(3)]
    iteration_ids = [r.pk for r in iterations]

    # Step 1: search the baselines and pick alpha.
    page.goto(f"{live_server.url}/compare/")
    page.locator("#step-baseline input[name=bq]").fill("alpha")
    page.locator("#step-baseline").get_by_role("button", name="Search").click()
    expect(page.locator("#baselines tbody tr")).to_have_count(1)
    page.locator(f'#baselines tr[data-run="{alpha.pk}"]').get_by_role(
        "link", name="Use as baseline"
    ).click()
    expect(page.locator("#step-candidates")).to_be_visible()
    assert params(page.url) == {"baseline": str(alpha.pk)}

    # Step 2: search narrows to the iterations; one page of 25 shows of 30 matching.
    page.locator("#candidate-search input[name=q]").fill("iter")
    page.locator("#candidate-search").get_by_role("button", name="Search").click()
    expect(page.locator("#candidates tbody tr")).to_have_count(25)
    expect(page.locator("#step-candidates")).to_contain_text(f"{ITERATIONS} match")

    # Select all: every matching run on every page, none of the others.
    page.locator("#select-all").click()
    expect(page.locator("#selected-count")).to_have_text(str(ITERATIONS))
    assert ids_parse(params(page.url)["candidates"]) == iteration_ids
    page.locator("#candidate-selection").get_by_role("button", name="Next →").click()
    expect(page.locator("#candidates tbody tr")).to_have_count(ITERATIONS - 25)
    for r in iterations[25:]:
        expect(page.locator(f"#pick-{r.pk}")).to_be_checked()
    assert not set(ids_parse(params(page.url)["candidates"])) & {r.pk for r in others}
    screenshot(page, "compare-01-select-all")

    # Compare: 30 comparisons, 25 cards on the first page of results.
    page.locator("#compare-runs").click()
    expect(page.locator("#results")).to_be_visible()
    expect(page.locator("#cards article.result-card")).to_have_count(25)
    expect(page.locator("#cards h3").first).to_contain_text(f"of {ITERATIONS}")
    expect(page.locator("#cards-pager")).to_be_visible()
    screenshot(page, "compare-02-results")

    # Change one candidate: untick it and update; the old results are hidden.
    dropped = iterations[-1]
    page.locator(f"#pick-{dropped.pk}").uncheck()
    page.locator("#candidate-selection").get_by_role("button", name="Update selection").click()
    expect(page.locator("#results")).to_have_count(0)
    expect(page.locator("#results-hidden")).to_be_visible()
    expect(page.locator(".messages")).to_contain_text("previous comparison is hidden")
    expect(page.locator("#selected-count")).to_have_text(str(ITERATIONS - 1))

    # Compare again: the new selection.
    page.locator("#compare-runs").click()
    expect(page.locator("#cards h3").first).to_contain_text(f"of {ITERATIONS - 1}")
    kept = iteration_ids[:-1]
    expect(page.locator("#chart-legend tr[data-run]")).to_have_count(ITERATIONS - 1)
    comparison_url = page.url
    first_cards = card_ids(page)
    first_deltas = page.locator("#cards td.delta").all_inner_texts()
    assert first_cards == [f"card-{pk}-router" for pk in kept[:25]]

    # Change the baseline: back to step 1, the candidates are gone.
    page.locator("#change-baseline").click()
    expect(page.locator("#baselines")).to_be_visible()
    page.locator(f'#baselines tr[data-run="{beta.pk}"]').get_by_role(
        "link", name="Use as baseline"
    ).click()
    expect(page.locator("#selected-count")).to_have_text("0")
    assert params(page.url) == {"baseline": str(beta.pk)}
    expect(page.locator("#results")).to_have_count(0)

    # The saved link reproduces the same comparison.
    page.goto(comparison_url)
    expect(page.locator("#cards article.result-card")).to_have_count(25)
    assert card_ids(page) == first_cards
    assert page.locator("#cards td.delta").all_inner_texts() == first_deltas
    page.reload()
    assert card_ids(page) == first_cards

    # The API, with a token, for the same selection.
    token, _ = Token.objects.get_or_create(user=member)
    api = page.request.post(
        f"{live_server.url}/api/v1/compare/",
        data=json.dumps({"baseline": alpha.pk, "candidates": kept}),
        headers={"Authorization": f"Token {token.key}", "Content-Type": "application/json"},
    )
    assert api.ok, api.text()
    doc = api.json()
    assert [c["run"] for c in doc["comparisons"]] == kept
    assert doc["model_requests"] == 0

    # Downloads: both exports hold every compared candidate, with the API's numbers.
    with page.expect_download() as got:
        page.locator("#export-csv").click()
    csv_path = got.value.path()
    assert got.value.suggested_filename.endswith(".csv")
    table = list(csv.DictReader(io.StringIO(Path(csv_path).read_text(encoding="utf-8"))))
    with page.expect_download() as got:
        page.locator("#export-json").click()
    exported = json.loads(Path(got.value.path()).read_text(encoding="utf-8"))
    screenshot(page, "compare-03-reloaded")

    candidates = [r for r in table if r["row"] == "candidate"]
    assert [int(r["run"]) for r in candidates] == kept
    assert [r for r in table if r["row"] == "baseline"][0]["target"] == "base-a"
    for row, c in zip(candidates, doc["comparisons"], strict=True):
        assert row["target"] == c["target"]
        assert row["delta_exact"] == c["delta_exact"]
        assert float(row["delta"]) == c["delta"]
        assert float(row["interval_lower"]) == c["interval"]["lower"]
        assert float(row["interval_upper"]) == c["interval"]["upper"]
        assert (int(row["wins"]), int(row["losses"]), int(row["ties"])) == (
            c["wins"],
            c["losses"],
            c["ties"],
        )
        # Unknown stays an empty cell, never 0.
        assert row["subject_savings_pct"] == (c["savings"]["subject_cost_pct"] or "")
        si = c["savings_interval"]
        for key in ("lower", "upper", "alpha", "draws", "seed", "label"):
            cell = row[f"savings_interval_{key}"]
            if si is None:
                assert cell == ""
            elif key == "label":
                assert cell == si[key]
            else:
                assert float(cell) == si[key]
    assert any(c["savings"]["subject_cost_pct"] is None for c in doc["comparisons"])
    assert any(c["savings"]["subject_cost_pct"] is not None for c in doc["comparisons"])
    assert any(c["savings_interval"] is None for c in doc["comparisons"])
    assert any(c["savings_interval"] is not None for c in doc["comparisons"])

    # The JSON export is the API's document plus the selection it was made from.
    selection = exported.pop("selection")
    assert selection["baseline"] == alpha.pk and selection["candidates"] == kept
    assert exported == doc
