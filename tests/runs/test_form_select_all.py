"""Create evaluation without JavaScript (issue 23; SPEC R8.1–R8.5): "Select all benchmarks" is
a convenience of the page's script, not a field, so the plan holds exactly the ticked boxes;
τ³ has a user-simulator control and each judged benchmark a judge control, defaulted from the
registry's single-model targets named for that role."""

from __future__ import annotations

import re

import pytest

from datasets.benchmarks import ADAPTERS
from datasets.services import source_prepare
from runs.models import Run
from runs.planning.plans import LimitsSerializer
from tests import factories as f

pytestmark = pytest.mark.django_db

NINE = list(ADAPTERS)


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    user = f.user_create(username="alice")
    client.force_login(user)
    return user


@pytest.fixture
def nine_sources():  # type: ignore[no-untyped-def]
    for benchmark in NINE:
        source_prepare(benchmark=benchmark, profile="smoke")
    for slug, name in (
        ("sim-strong", "strong"),
        ("sim-judge", "judge"),
        ("sim-user", "user simulator"),
    ):
        f.target_create(slug=slug, name=name, model=slug)


def form_data(**overrides):  # type: ignore[no-untyped-def]
    limits = LimitsSerializer().fields
    data = {
        "profile": "smoke",
        "seed": "20260918",
        "name": "from the form",
        "targets": ["sim-strong"],
        "failure_policy": "stop",
        "slots": "1",
        "action": "review",
        **{
            name: str(limits[name].default)
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
    }
    data.update(overrides)
    return data


def test_the_form_offers_nine_boxes_and_role_defaults_and_select_all_submits_nothing(
    client, member, nine_sources
):
    html = client.get("/runs/new/?profile=smoke").content.decode()
    for benchmark in NINE:
        assert f'id="bench-{benchmark}"' in html, benchmark
    # The nine in the spec's order, whatever order the sources were stored in.
    positions = [html.index(f'id="bench-{b}"') for b in NINE]
    assert positions == sorted(positions)
    control = re.search(r'<label class="choice select-all"[^>]*>.*?</label>', html, re.S).group(0)
    assert "Select all benchmarks" in control and "hidden" in control
    assert "name=" not in control  # never submitted: the boxes are what is submitted
    simulator = re.search(r'<select name="simulator_tau3".*?</select>', html, re.S).group(0)
    assert re.search(r'<option value="sim-user" selected>', simulator), simulator
    for judged in ("simpleqa", "hle"):
        judge = re.search(rf'<select name="judge_{judged}".*?</select>', html, re.S).group(0)
        assert re.search(r'<option value="sim-judge" selected>', judge), judge
    tau_judge = re.search(r'<select name="judge_tau3".*?</select>', html, re.S).group(0)
    # Optional for τ³, but defaulted too: without one its assertions end unscored.
    assert "no judge" in tau_judge and re.search(r'<option value="sim-judge" selected>', tau_judge)
    assert 'name="non_inferiority_margin"' in html and 'name="slots"' in html


def test_eight_ticked_boxes_make_a_plan_of_eight_even_with_the_old_select_all(
    client, member, nine_sources
):
    eight = [b for b in NINE if b != "gpqa"]
    data = form_data(
        benchmarks=eight,
        select_all="on",  # the old server-side field: ignored now
        judge_simpleqa="sim-judge",
        judge_hle="sim-judge",
        simulator_tau3="sim-user",
    )
    review = client.post("/runs/new/", data).content.decode()
    assert 'id="plan-hash"' in review, review[:4000]
    table = re.search(r'<table class="compact" id="plan-benchmarks">.*?</table>', review, re.S)
    shown = re.findall(r"<tr><td>([a-z0-9-]+)</td>", table.group(0))
    # What cannot run on this server (e.g. SciCode without its test data) is ticked but left
    # out before any model call, and named on the review page (issue 22).
    not_run = re.findall(r"<li>([a-z0-9-]+): \d+ question", review)
    assert shown == [b for b in eight if b not in not_run]  # in the spec's order
    assert "gpqa" not in shown and "gpqa" not in not_run
    key = re.search(r'name="idempotency_key" value="([0-9a-f]+)"', review).group(1)
    plan_hash = re.search(r'<code id="plan-hash">([0-9a-f]{64})</code>', review).group(1)
    start = {**data, "action": "start", "idempotency_key": key, "reviewed_plan_sha256": plan_hash}
    assert client.post("/runs/new/", start).status_code == 303
    run = Run.objects.get()
    frozen = {
        *run.manifest["benchmarks"],
        *(e["benchmark"] for e in run.manifest.get("not_run", [])),
    }
    assert frozen == set(eight)
    assert run.manifest["simulators"]["tau3"]["slug"] == "sim-user"


def test_without_a_user_simulator_the_error_is_next_to_its_control(client, member, nine_sources):
    html = client.post(
        "/runs/new/", form_data(benchmarks=["tau3"], simulator_tau3="")
    ).content.decode()
    assert 'id="plan-hash"' not in html
    control = re.search(r"<label>User simulator for tau3.*?</label>", html, re.S).group(0)
    assert "a user-simulator target is required" in control, control
    assert "{&#x27;" not in html and "{'" not in html
