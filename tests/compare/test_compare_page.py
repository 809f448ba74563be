"""The Compare iterations page (issue 9, SPEC R11) through the Django test client: which runs
are offered, the selection in the URL, results hidden after a change, refused pairs, the
numbers against comparison_build, the statements, and constant queries as candidates grow."""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from compare.forms import ids_format, ids_parse
from compare.results import STATEMENTS
from compare.services import comparison_build
from compare.verdict import interval_shown
from runs.models import Cell, Run
from srbench.presenters import percent_html, signed_text
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

OUT = [True, False, True, False]


@pytest.fixture
def member(client):
    client.force_login(f.user_create())
    return client


@pytest.fixture
def qs():
    return b.questions({"mmlu-pro": 4})


def named(run, name):
    # The builders' keyword arguments go into the manifest; the run's own name is set here.
    Run.objects.filter(pk=run.pk).update(name=name)
    run.name = name
    return run


def baseline_run(qs, slug="base", *, name="baseline", **kw):
    return named(b.run(qs, {b.target(slug): OUT}, **kw), name)


def router_runs(qs, n, *, name="iter", router=None, **kw):
    router = router or b.target(f"router-{name}", kind="mom")
    return [
        named(b.run(qs, {router: [True, True, i % 2 == 0, False]}, **kw), f"{name}-{i}")
        for i in range(n)
    ]


def rows(html: str, table_id: str) -> list[int]:
    match = re.search(rf'<table[^>]* id="{table_id}".*?</table>', html, re.S)
    return [int(x) for x in re.findall(r'<tr data-run="(\d+)"', match.group(0))] if match else []


def location_params(response) -> dict[str, str]:
    assert response.status_code == 302, response.status_code
    return {k: v[0] for k, v in parse_qs(urlsplit(response["Location"]).query).items()}


def url(**params) -> str:
    from compare.views import compare_url

    return compare_url(**params)


# --- step 1 ---------------------------------------------------------------------------------


def test_baseline_step_offers_only_eligible_runs(member, qs):
    a = baseline_run(qs, name="alpha")
    mom_only = router_runs(qs, 1, name="mom-only")[0]  # comparable with a, never a baseline
    lonely = baseline_run(b.questions({"mmlu-pro": 3}), slug="lonely", name="lonely")
    preview = baseline_run(qs, slug="prev", name="preview", mode="preview")
    unfinished = baseline_run(qs, slug="unfin", name="unfinished")
    Cell.objects.filter(run=unfinished).update(status="pending", correct=None, scored=False)
    running = baseline_run(qs, slug="runn", name="running", status="running")
    # Alone on its cases, but its router target is a candidate of its own single model.
    self_pair = b.run(
        b.questions({"mmlu-pro": 2}),
        {b.target("solo"): [True, False], b.target("solo-r", kind="mom"): [True, True]},
        name="self-pair",
    )

    html = member.get(url()).content.decode()

    offered = rows(html, "baselines")
    assert set(offered) == {a.pk, self_pair.pk}
    assert mom_only.pk not in offered and lonely.pk not in offered
    assert preview.pk not in offered and unfinished.pk not in offered
    assert running.pk not in offered
    # A preview run is not a candidate either; the router-only run is.
    candidates = rows(member.get(url(baseline=a.pk)).content.decode(), "candidates")
    assert mom_only.pk in candidates and preview.pk not in candidates
    assert running.pk not in candidates


def test_baseline_search_by_name_id_and_model(member, qs):
    a = baseline_run(qs, name="nightly-alpha")
    c = baseline_run(qs, slug="gpt-x", name="other")
    router_runs(qs, 1)

    assert rows(member.get(url(bq="NIGHTLY")).content.decode(), "baselines") == [a.pk]
    assert rows(member.get(url(bq=f"#{c.pk}")).content.decode(), "baselines") == [c.pk]
    assert rows(member.get(url(bq="gpt-x")).content.decode(), "baselines") == [c.pk]


# --- step 2 ---------------------------------------------------------------------------------


def test_candidates_are_in_creation_order_and_search_narrows(member, qs):
    a = baseline_run(qs)
    first = router_runs(qs, 3, name="first")
    second = router_runs(qs, 2, name="second")

    html = member.get(url(baseline=a.pk)).content.decode()
    assert rows(html, "candidates") == [r.pk for r in [*first, *second]]
    html = member.get(url(baseline=a.pk, q="second")).content.decode()
    assert rows(html, "candidates") == [r.pk for r in second]


def test_select_all_selects_every_matching_run_across_pages(member, qs):
    a = baseline_run(qs)
    router = b.target("r", kind="mom")  # one router, so only the run names differ
    matching = router_runs(qs, 40, name="wanted", router=router)
    others = router_runs(qs, 20, name="other", router=router)
    already = others[0].pk

    page_one = member.get(url(baseline=a.pk, q="wanted", candidates=[already])).content.decode()
    assert len(rows(page_one, "candidates")) == 25  # one page of 25 shows; 40 match

    params = location_params(
        member.get(url(baseline=a.pk, q="wanted", candidates=[already]) + "&op=select_all&shown=")
    )
    assert ids_parse(params["candidates"]) == sorted([r.pk for r in matching] + [already])
    assert "compare" not in params

    params = location_params(
        member.get(
            url(baseline=a.pk, q="wanted", candidates=params["candidates"], op="deselect_all")
        )
    )
    assert ids_parse(params["candidates"]) == [already]


def test_ticks_on_one_page_replace_only_that_pages_part_of_the_selection(member, qs):
    a = baseline_run(qs)
    runs = router_runs(qs, 30)
    ids = [r.pk for r in runs]
    keep_from_page_two = ids[27]
    shown = ids_format(ids[:25])

    response = member.get(
        url(baseline=a.pk, candidates=[ids[0], ids[1], keep_from_page_two])
        + f"&shown={shown}&pick={ids[1]}&pick={ids[2]}&goto=2&op=apply"
    )
    params = location_params(response)
    assert ids_parse(params["candidates"]) == [ids[1], ids[2], keep_from_page_two]
    assert params["page"] == "2"


def test_changing_the_baseline_clears_the_candidates(member, qs):
    a = baseline_run(qs, name="a")
    a2 = baseline_run(qs, slug="base2", name="a2")
    cands = router_runs(qs, 2)

    html = member.get(url(baseline=a.pk, candidates=[c.pk for c in cands])).content.decode()
    change = re.search(r'<a href="([^"]*)" id="change-baseline"', html).group(1)
    assert change == "/compare/"
    step_one = member.get(change).content.decode()
    links = re.findall(r'<a class="button" href="([^"]+)">Use as baseline', step_one)
    assert links and all(
        set(parse_qs(urlsplit(x.replace("&amp;", "&")).query)) == {"baseline"} for x in links
    )
    assert f"/compare/?baseline={a2.pk}" in step_one


def test_changing_the_selection_hides_results_until_compare_is_pressed(member, qs):
    a = baseline_run(qs)
    c1, c2 = router_runs(qs, 2)
    compared = url(baseline=a.pk, candidates=[c1.pk], compare=True)
    html = member.get(compared).content.decode()
    assert 'id="results"' in html and f'id="card-{c1.pk}-' in html

    # Same selection submitted again (e.g. the pager): results stay.
    same = location_params(member.get(compared + f"&shown={c1.pk},{c2.pk}&pick={c1.pk}&op=apply"))
    assert same["compare"] == "1"

    # Ticking another run: redirect without compare=1, so the old results are hidden.
    response = member.get(compared + f"&shown={c1.pk},{c2.pk}&pick={c1.pk}&pick={c2.pk}&op=apply")
    changed = location_params(response)
    assert "compare" not in changed and ids_parse(changed["candidates"]) == [c1.pk, c2.pk]
    html = member.get(response["Location"]).content.decode()
    assert 'id="results"' not in html and 'id="results-hidden"' in html
    assert "previous comparison is hidden" in html

    # Compare runs: results for the new selection.
    response = member.get(
        url(baseline=a.pk, candidates=[c1.pk, c2.pk])
        + f"&shown={c1.pk},{c2.pk}&pick={c1.pk}&pick={c2.pk}&op=compare"
    )
    assert location_params(response)["compare"] == "1"
    html = member.get(response["Location"]).content.decode()
    assert f'id="card-{c1.pk}-' in html and f'id="card-{c2.pk}-' in html


# --- results ----------------------------------------------------------------------------------


def test_the_link_reproduces_the_comparison_and_numbers_equal_the_service(member, qs):
    base = b.target("base")
    a = b.run(qs, {base: OUT}, costs={base: Decimal("0.01")})
    router = b.target("router", kind="mom")
    cheap = b.run(qs, {router: [True, True, True, False]}, costs={router: Decimal("0.004")})
    unknown = b.run(qs, {router: [True, False, True, True]}, costs={router: [None] * 4})
    link = url(baseline=a.pk, candidates=[cheap.pk, unknown.pk], compare=True)

    first = member.get(link).content.decode()
    again = member.get(link).content.decode()
    doc = comparison_build(baseline_run_id=a.pk, candidate_run_ids=[cheap.pk, unknown.pk])

    def card(html, c):
        return re.search(
            rf'<article class="result-card" id="card-{c["run"]}-{c["target"]}".*?</article>',
            html,
            re.S,
        ).group(0)

    for c in doc["comparisons"]:
        for html in (first, again):
            text = card(html, c)
            assert (
                f'<td class="num delta" title="{c["delta_exact"]}">{signed_text(c["delta"])}</td>'
                in text
            )
            assert (
                f'<td class="num interval">{interval_shown(c["interval"]["lower"], c["interval"]["upper"])}</td>'
                in text
            )
            assert f"{c['wins']} / {c['losses']} / {c['ties']}" in text
    by_run = {c["run"]: c for c in doc["comparisons"]}
    assert percent_html(by_run[cheap.pk]["savings"]["subject_cost_pct"]) == "60.0%"
    assert "60.0%" in card(first, by_run[cheap.pk])
    unknown_card = card(first, by_run[unknown.pk])
    savings_cells = re.findall(r'<td class="num savings"[^>]*>(.*?)</td>', unknown_card)
    assert savings_cells[0] == '<span class="unknown">unknown</span>'
    assert "the candidate&#x27;s cost is incomplete" in unknown_card
    # The unknown cost is drawn in its own lane, not at 0 %.
    assert f'data-run="{unknown.pk}" data-target="router" data-savings="unknown"' in first
    assert "savings unknown" in first
    # Both candidates get one mark with an interval in each chart.
    for chart in ("chart-quality-cost", "chart-iteration"):
        svg = re.search(rf'<figure id="{chart}">.*?</figure>', first, re.S).group(0)
        assert svg.count('<g class="mark"') == 2
        assert svg.count('class="interval"') >= 2
    assert "family-wise" in first.lower()  # two candidates: the Bonferroni interval is shown


def test_refused_pairs_are_listed_with_their_reasons(member, qs):
    a = baseline_run(qs)
    (ok,) = router_runs(qs, 1)
    (hot,) = router_runs(qs, 1, name="hot", sampling={"temperature": 1})
    preview = baseline_run(qs, slug="pv", mode="preview")

    html = member.get(
        url(baseline=a.pk, candidates=[ok.pk, hot.pk, preview.pk], compare=True)
    ).content.decode()

    refused = re.search(r'<section id="refused">.*?</section>', html, re.S).group(0)
    assert f'data-run="{hot.pk}"' in refused and f'data-run="{preview.pk}"' in refused
    assert "sampling.temperature: 0 in the baseline, 1 in the candidate" in refused
    assert "preview runs are never comparable" in refused
    assert f'id="card-{ok.pk}-' in html  # the comparable one is still compared
    # Not offered in the candidate list either, and said so.
    assert f"runs {hot.pk}, {preview.pk}" in html

    html = member.get(url(baseline=a.pk, candidates=[hot.pk], compare=True)).content.decode()
    assert "Every selected run was refused." in html and 'id="refused"' in html


def test_statements_are_on_the_page(member, qs):
    a = baseline_run(qs)
    (c,) = router_runs(qs, 1)
    html = member.get(url(baseline=a.pk, candidates=[c.pk], compare=True)).content.decode()
    for key in ("improvement", "intervals_scope", "small_samples", "cache_neutral", "token_prices"):
        assert STATEMENTS[key].replace("'", "&#x27;") in html, key
    assert "neither a bill nor a measured cache-free execution" in html
    assert "Bootstrap interval (diagnostic only)" in html


def test_a_positive_estimate_crossing_zero_says_not_an_improvement(member, qs):
    a = baseline_run(qs)
    router = b.target("r", kind="mom")
    gain = b.run(qs, {router: [True, True, True, False]})  # +1 of 4: interval crosses zero
    html = member.get(url(baseline=a.pk, candidates=[gain.pk], compare=True)).content.decode()
    assert (
        '<strong class="verdict-word">Inconclusive</strong>: the point estimate +0.2500 is positive but the 95% family-wise interval'
        in html
    )
    assert "includes 0: not an improvement" in html


def test_cards_are_paginated_but_charts_and_exports_keep_every_comparison(member, qs):
    a = baseline_run(qs)
    runs = router_runs(qs, 30)
    ids = [r.pk for r in runs]
    html = member.get(url(baseline=a.pk, candidates=ids, compare=True)).content.decode()
    assert html.count('<article class="result-card"') == 25
    assert html.count('<g class="mark"') == 60  # 30 per chart
    assert len(rows(html, "chart-legend")) == 30
    page_two = member.get(url(baseline=a.pk, candidates=ids, compare=True) + "&rpage=2")
    assert page_two.content.decode().count('<article class="result-card"') == 5

    csv_href = re.search(r'href="([^"]+)" id="export-csv"', html).group(1).replace("&amp;", "&")
    json_href = re.search(r'href="([^"]+)" id="export-json"', html).group(1).replace("&amp;", "&")
    table = list(csv.DictReader(io.StringIO(member.get(csv_href).content.decode())))
    assert [r["run"] for r in table if r["row"] == "candidate"] == [str(i) for i in ids]
    doc = json.loads(member.get(json_href).content)
    assert [c["run"] for c in doc["comparisons"]] == ids
    assert doc["model_requests"] == 0 and doc["statements"] == STATEMENTS


def test_query_count_is_constant_as_candidates_grow(member, qs, django_assert_max_num_queries):
    a = baseline_run(qs)
    few = [r.pk for r in router_runs(qs, 5, name="few")]
    many = [r.pk for r in router_runs(qs, 30, name="many")]

    def count(ids, **extra):
        with CaptureQueriesContext(connection) as ctx:
            response = member.get(url(baseline=a.pk, candidates=ids, compare=True, **extra))
        assert response.status_code == 200
        return len(ctx.captured_queries)

    # The first read of a settled run computes its figures and stores them (compare.figures),
    # in one batch whatever the number of runs: as many queries for 5 new runs as for 30.
    cold_few = [r.pk for r in router_runs(qs, 5, name="cold-few")]
    cold_many = [r.pk for r in router_runs(qs, 30, name="cold-many")]
    count(few)  # warm the fingerprint cache and store the figures
    assert count(cold_many) <= count(cold_few)
    count(many)
    small = count(few)
    assert count(many) <= small
    with django_assert_max_num_queries(small):
        member.get(url(baseline=a.pk, candidates=[*few, *many], compare=True))
    with django_assert_max_num_queries(small):
        member.get(url(bq=""))


def test_a_damaged_link_says_so(member):
    response = member.get("/compare/?baseline=1&candidates=9-3")
    assert response.status_code == 400
    assert "This link is damaged" in response.content.decode()


def test_ids_are_written_compactly_and_read_both_ways():
    assert ids_format([5, 3, 4, 9, 11, 10, 1]) == "1,3-5,9-11"
    assert ids_parse("1,3-5,9-11") == [1, 3, 4, 5, 9, 10, 11]
    assert ids_parse("7,7,2") == [2, 7]
    with pytest.raises(ValueError):
        ids_parse("1-100000000")


def test_login_required(client):
    response = client.get("/compare/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_a_router_whose_whole_interval_is_below_zero_is_called_worse(member):
    many = b.questions({"mmlu-pro": 30})
    a = named(b.run(many, {b.target("base"): [True] * 30}), "baseline")
    loss = b.run(many, {b.target("r", kind="mom"): [False] * 30})  # Δ = −1, half-width ≈ 0.5
    html = member.get(url(baseline=a.pk, candidates=[loss.pk], compare=True)).content.decode()
    assert (
        '<p class="verdict bad" data-verdict="worse"><strong class="verdict-word">Worse</strong>: the whole 95% family-wise interval'
        in html
    )
    assert "No improvement shown" not in html


def test_scatter_labels_never_overlap_when_candidates_sit_together():
    """Issue 23 (R11.4): numbers of candidates at the same or nearby points are spread so no
    two overlap; each stays within the plot."""
    from compare.charts import LABEL_CHAR_PX, LABEL_HEIGHT_PX, ChartPoint, charts

    def point(delta: float, savings: str | None) -> ChartPoint:
        lo, hi = delta - 0.05, delta + 0.05
        return ChartPoint(
            run=1,
            target="t",
            delta=delta,
            lower=lo,
            upper=hi,
            family_lower=lo,
            family_upper=hi,
            savings=None if savings is None else Decimal(savings),
        )

    points = [point(0.10, "20") for _ in range(6)]
    points += [point(0.101, "20.5"), point(0.0, None), point(0.0, None)]
    points += [point(-0.2, "-10")]
    marks = charts(points)["quality_cost"]["marks"]
    boxes = [
        (m["label_x"], m["label_y"], m["label_x"] + LABEL_CHAR_PX * len(str(m["n"])) + 2)
        for m in marks
    ]
    for i, (x0, y0, x1) in enumerate(boxes):
        for a0, b0, a1 in boxes[i + 1 :]:
            assert x1 <= a0 or a1 <= x0 or abs(y0 - b0) >= LABEL_HEIGHT_PX, (i, boxes)


def test_the_baseline_diamond_has_no_binary_float_residue() -> None:
    """Found by the README path's artefact detector on the demo's headline comparison: the
    origin at y = 64.04 drew a corner at 57.040000000000006."""
    from compare.charts import diamond_points

    assert 64.04 - 7 != 57.04  # the residue this guards against
    assert diamond_points(110.62, 64.04) == "110.62,57.04 117.62,64.04 110.62,71.04 103.62,64.04"
