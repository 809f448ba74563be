"""Create evaluation as a demanding user meets it (issue 35 item 7): the form opens on a
profile instead of an empty page, a prepared source without questions cannot be ticked (its
reason is shown, and a hand-made POST is refused), and a form that cannot be reviewed lists
every error at the top, each linking to its field."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from datasets.models import FrozenDataset, Source
from datasets.profiles import DEFAULT_SEED
from datasets.services import source_prepare
from runs.models import Run
from tests import factories as f
from tests.runs.test_form_select_all import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    user = f.user_create(username="alice")
    client.force_login(user)
    return user


def empty_source(benchmark: str, profile: str = "smoke") -> Source:
    """A prepared source that holds no question, as preparing a split the local file does not
    have leaves it (issue 35: MMLU-Pro standard from the demo's files gives 0 of 2,000)."""
    split = "holdout" if profile == "standard" else "dev"
    return Source.objects.create(
        benchmark=benchmark,
        profile=profile,
        seed=DEFAULT_SEED,
        split=split,
        content_sha256="0" * 64,
        provenance={"origin": "fixture"},
        requested_count=5,
        count=0,
    )


def checked_profile(page: str) -> list[str]:
    return re.findall(r'<input type="radio" name="profile" value="(\w+)" checked', page)


def summary_items(page: str) -> list[tuple[str, str]]:
    """(link target, text) of each item of the error summary; '' for an item without a link."""
    box = re.search(r'<div class="error-summary" id="error-summary".*?</div>', page, re.S)
    assert box, "no error summary at the top of the page"
    items = re.findall(r"<li>(.*?)</li>", box.group(0), re.S)
    out = []
    for item in items:
        link = re.match(r'<a href="#([^"]+)">(.*)</a>$', item, re.S)
        out.append(
            (link.group(1), html_lib.unescape(link.group(2)))
            if link
            else ("", html_lib.unescape(item))
        )
    return out


def test_the_form_opens_on_the_cheapest_profile_that_has_prepared_questions(client, member):
    """Decision (issue 35 item 7): a demanding user who opens Create evaluation expects a form
    ready to fill in, not an empty page that first asks for a profile. It opens on the
    cheapest profile — smoke, quick, standard in that order — that has a prepared source
    with questions (a profile with only empty sources would offer nothing to run), says on
    the page that it was preselected, and any profile asked for in the URL wins. A POST must
    name its profile: one without is never given a default behind the user's back."""
    nothing = client.get("/runs/new/").content.decode()
    assert checked_profile(nothing) == ["smoke"]  # nothing prepared: smoke, and how to prepare
    assert "No prepared source for this profile yet" in nothing
    assert 'id="profile-preselected"' in nothing

    empty_source("mmlu-pro", "smoke")  # smoke has a source, but without questions
    source_prepare(benchmark="mmlu-pro", profile="quick")
    page = client.get("/runs/new/").content.decode()
    assert checked_profile(page) == ["quick"]
    assert 'id="bench-mmlu-pro"' in page and 'id="evaluation-form"' in page
    assert "<strong>quick</strong> is preselected" in page

    asked = client.get("/runs/new/?profile=smoke").content.decode()
    assert checked_profile(asked) == ["smoke"] and 'id="profile-preselected"' not in asked

    data = form_data(benchmarks=["mmlu-pro"], targets=[])
    del data["profile"]
    refused = client.post("/runs/new/", data).content.decode()
    assert 'id="profile-error"' in refused and 'id="evaluation-form"' not in refused
    assert checked_profile(refused) == []


def test_a_source_without_questions_cannot_be_ticked_and_is_refused_on_post(client, member):
    """issue 35 item 7: the 0-question source is shown, its box disabled with the reason next
    to it; a POST that ticks it anyway is refused with that reason — never composed into a
    dataset, never silently dropped from the plan."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    empty_source("simpleqa")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    f.target_create(slug="sim-judge", name="judge", model="sim-judge")

    page = client.get("/runs/new/?profile=smoke").content.decode()
    box = re.search(r'<input type="checkbox" name="benchmarks" value="simpleqa"[^>]*>', page)
    assert box and "disabled" in box.group(0), box
    assert 'aria-describedby="bench-simpleqa-why"' in box.group(0)
    reason = re.search(r'<td id="bench-simpleqa-why">(.*?)</td>', page, re.S).group(1)
    assert "0 questions: nothing to evaluate" in reason
    ok = re.search(r'<input type="checkbox" name="benchmarks" value="mmlu-pro"[^>]*>', page)
    assert "disabled" not in ok.group(0)

    datasets_before = FrozenDataset.objects.count()
    for ticked in (["simpleqa"], ["mmlu-pro", "simpleqa"]):
        data = form_data(benchmarks=ticked, judge_simpleqa="sim-judge")
        html = client.post("/runs/new/", data).content.decode()
        assert 'id="plan-hash"' not in html, ticked
        items = summary_items(html)
        assert len(items) == 1, items
        anchor, text = items[0]
        assert anchor == "bench-mmlu-pro"  # the first box that can be ticked
        assert text.startswith("Prepared benchmarks: simpleqa has no question in its smoke")
        assert "0 of 5 prepared" in text and "nothing to evaluate" in text
    assert FrozenDataset.objects.count() == datasets_before and Run.objects.count() == 0

    # Without it the same form reviews.
    fine = client.post("/runs/new/", form_data(benchmarks=["mmlu-pro"])).content.decode()
    assert 'id="plan-hash"' in fine


def test_every_error_is_listed_at_the_top_in_page_order_with_a_link_to_its_field(client, member):
    """issue 35 item 7: the long Create form lists every error at its top — the form's own
    checks and the plan's (here the non-inferiority margin, refused by plan_freeze) — in the
    order the fields appear, each a link to an element that exists on the page."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")

    data = form_data(benchmarks=[], targets=[], temperature="5", concurrency="0", name="")
    page = client.post("/runs/new/", data).content.decode()
    items = summary_items(page)
    assert [a for a, _ in items] == [
        "bench-mmlu-pro",
        "target-sim-strong",
        "id_temperature",
        "id_concurrency",
        "id_name",
    ], items
    texts = [t for _, t in items]
    assert texts[0] == "Prepared benchmarks: Tick at least one benchmark."
    assert texts[1].startswith("Targets: ") and texts[2].startswith("Temperature: ")
    assert texts[3].startswith("Concurrency: ") and texts[4].startswith("Name: ")
    assert "5 problems" in page
    for anchor, _ in items:
        assert f'id="{anchor}"' in page, anchor
    # The summary comes first: before the profile step and every fieldset.
    assert page.index('id="error-summary"') < page.index('id="profile-step"')

    plan_error = form_data(benchmarks=["mmlu-pro"], non_inferiority_margin="1")
    page = client.post("/runs/new/", plan_error).content.decode()
    items = summary_items(page)
    assert [a for a, _ in items] == ["id_non_inferiority_margin"], items
    assert "strictly between 0 and 1" in items[0][1]

    # A form without errors has no summary.
    fine = client.get("/runs/new/?profile=smoke").content.decode()
    assert 'id="error-summary"' not in fine


def test_the_form_asks_in_official_prompts_and_sets_the_tau_turn_limit(client, member):
    """issue 37 items 2 and 3 on the web path, not only the API and --plan-file: official
    prompting ticked for LiveCodeBench is frozen with the package's file and hash (and shown on
    the review), a box for a benchmark not selected is ignored like official scoring's, the τ
    turn limit is frozen as typed, and a limit out of range is an error at its field."""
    source_prepare(benchmark="livecodebench", profile="smoke")
    source_prepare(benchmark="tau3", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    f.target_create(slug="sim-user", name="user", model="sim-user")
    page = client.get("/runs/new/?profile=smoke").content.decode()
    assert 'name="official_prompting" value="livecodebench"' in page
    assert 'name="tau_max_turns" value="200"' in page

    data = form_data(
        benchmarks=["livecodebench", "tau3"],
        simulator_tau3="sim-user",
        official_prompting=["livecodebench", "scicode"],
        tau_max_turns="37",
    )
    html = client.post("/runs/new/", data).content.decode()
    assert 'id="plan-hash"' in html, summary_items(html)
    prompting = re.search(r'<span class="meta official-prompting">(.*?)</span>', html, re.S)
    assert prompting and "nvidia-livecodebench" in prompting.group(1), html
    assert html.count('class="meta official-prompting"') == 1  # scicode was not selected
    assert '<span class="meta tau-max-turns">agent-turn limit 37</span>' in html

    refused = client.post("/runs/new/", {**data, "tau_max_turns": "0"}).content.decode()
    assert 'id="plan-hash"' not in refused
    assert [a for a, _ in summary_items(refused)] == ["id_tau_max_turns"]
    assert Run.objects.count() == 0


def test_the_form_refuses_a_deadline_seed_or_top_k_past_the_plans_bounds(client, member):
    """A run deadline of 1e20 s passed the form's review and crashed the run's worker; a seed
    or top-k past what servers take would fail every call. The form refuses them, each named
    at its field, and no run is made."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    data = form_data(
        benchmarks=["mmlu-pro"],
        max_run_seconds="99999999999999999999",
        sampling_seed=str(10**23),
        top_k=str(2**31),
    )
    page = client.post("/runs/new/", data).content.decode()
    anchors = [a for a, _ in summary_items(page)]
    assert {"id_max_run_seconds", "id_sampling_seed", "id_top_k"} <= set(anchors), anchors
    assert not Run.objects.exists()


def test_the_plans_own_field_rules_are_reported_with_the_forms_errors_at_once(client, member):
    """Outside probe, session 5: a margin of 1 was reported only on a second submission, after
    the form's own errors (here the name) were fixed. Every field error comes at once: the
    plan's rules (the margin; limits against each other) beside the form's, in page order. A
    refused limit is not replaced by its default to judge the others against."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")

    data = form_data(
        benchmarks=["mmlu-pro"], name="", non_inferiority_margin="1", idle_timeout_s="500"
    )
    items = summary_items(client.post("/runs/new/", data).content.decode())
    assert [a for a, _ in items] == [
        "id_idle_timeout_s",
        "id_non_inferiority_margin",
        "id_name",
    ], items
    assert "strictly between 0 and 1" in items[1][1]
    assert "must be ≤ total_timeout_s" in items[0][1]

    # A refused request timeout: the idle timeout is not judged against the default one.
    data = form_data(benchmarks=["mmlu-pro"], name="", total_timeout_s="abc", idle_timeout_s="500")
    items = summary_items(client.post("/runs/new/", data).content.decode())
    assert [a for a, _ in items] == ["id_total_timeout_s", "id_name"], items
    assert Run.objects.count() == 0 and FrozenDataset.objects.count() == 0


def test_a_judged_benchmark_without_its_judge_is_reported_with_the_forms_errors_at_once(
    client, member
):
    """A ticked SimpleQA without a judge target was reported only once every other field was
    right (plan_freeze reads the targets): now it comes with the form's own errors, at its
    field (no dataset composed for a refused form), and alone once the rest is right."""
    source_prepare(benchmark="simpleqa", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")

    items = summary_items(
        client.post("/runs/new/", form_data(benchmarks=["simpleqa"], name="")).content.decode()
    )
    assert [a for a, _ in items] == ["id_judge_simpleqa", "id_name"], items
    assert "judge target is required" in items[0][1]
    assert FrozenDataset.objects.count() == 0
    items = summary_items(
        client.post("/runs/new/", form_data(benchmarks=["simpleqa"])).content.decode()
    )
    assert [a for a, _ in items] == ["id_judge_simpleqa"], items
    assert Run.objects.count() == 0


def test_a_route_preview_of_a_prompt_the_form_refuses_says_why_not_write_one(client, member):
    """R8.7 (an outside probe, session 8): a preview prompt holding a NUL character was
    answered "Write a prompt to preview its route." — as if none was written. The field's own
    refusal is said instead; an empty prompt still asks for one. Nothing reaches a router."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    f.target_create(
        slug="router",
        kind="mom",
        model="auto",
        config_hash="a" * 64,
        preview_url="http://127.0.0.1:9/api/v1/routing/preview",
    )

    def preview_row(prompt: str) -> str:
        data = form_data(
            benchmarks=["mmlu-pro"], targets=["router"], action="preview", preview_prompt=prompt
        )
        page = client.post("/runs/new/", data).content.decode()
        table = re.search(
            r'<table class="compact" id="route-preview-results">.*?</table>', page, re.S
        )
        assert table, "no route preview results"
        return html_lib.unescape(re.sub(r"<[^>]+>", " ", table.group(0)))

    refused = preview_row("route\x00me")
    assert "Null characters are not allowed" in refused, refused
    assert "Write a prompt" not in refused
    assert "Write a prompt to preview its route." in preview_row("   ")
