"""What a preflight means for a plan, and its API and CLI surfaces (issue 39 items 1 and 2).

A target that showed stream cutting at C = 2 and a plan at C = 4: the review page warns before
any call; a case longer than the target's known context is listed as not run, never sent.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from datasets.benchmarks import get_adapter
from datasets.models import DatasetQuestion
from datasets.services import source_prepare
from runs.models import Call, Run
from runs.models.preflight import TargetPreflight
from runs.planning.plans import PlanError, plan_freeze
from srbench.simulator.testing import running_simulator
from tests import factories as f
from tests.cli_support import bench
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

WORDS = re.compile(r"\w+|[^\w\s]+")


def _estimate(messages) -> int:
    """The review's prompt estimate, recomputed here: word or symbol runs, 4 per message, 2."""
    return 2 + sum(4 + len(WORDS.findall(m["content"])) for m in messages)


def _showed(target, **facts) -> TargetPreflight:
    defaults = {
        "target": target,
        "status": "completed",
        "base_url": target.base_url,
        "model": target.model,
        "planned_calls": 9,
        "stream_usage": False,
        "cuts_at": 2,
        "max_whole_streams": 1,
    }
    return TargetPreflight.objects.create(**{**defaults, **facts})


@pytest.fixture
def member(client):
    user = f.user_create(username="member")
    client.force_login(user)
    return user


def _review_form(concurrency: str) -> dict:
    return {
        "profile": "smoke",
        "seed": "20260918",
        "name": "preflight review",
        "benchmarks": ["mmlu-pro"],
        "targets": ["smollm2"],
        "total_timeout_s": "300",
        "idle_timeout_s": "60",
        "max_output_tokens": "64",
        "max_output_chars": "200000",
        "concurrency": concurrency,
        "max_calls_per_case": "4",
        "case_timeout_s": "900",
        "max_run_seconds": "86400",
        "failure_policy": "stop",
        "slots": "1",
        "action": "review",
    }


def _estimates(dataset_id: int) -> list[int]:
    rows = DatasetQuestion.objects.filter(dataset_id=dataset_id).values_list(
        "question__benchmark", "question__payload"
    )
    return [_estimate(get_adapter(b).messages(p)) for b, p in rows]


def test_plan_review_warns_about_cutting_and_lists_long_cases_as_not_run(client, member):
    """issue 39 acceptance: cut at C = 2, plan at C = 4 → warned before any call; cases longer
    than the target's context → not run with their reason, never sent."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    target = f.target_create(slug="smollm2", model="smollm2", prices={})
    html = client.post("/runs/new/", _review_form("4")).content.decode()
    assert "Review plan" in html, html[:2000]
    plan_id = int(re.search(r'href="/datasets/(\d+)/"', html).group(1))
    estimates = sorted(_estimates(plan_id))
    context = estimates[len(estimates) // 2]  # about half the cases do not fit
    too_long = sum(1 for e in estimates if e > context)
    assert 0 < too_long < len(estimates)
    preflight = _showed(target, context_tokens=context)

    html = client.post("/runs/new/", _review_form("4")).content.decode()
    section = html[html.index('id="plan-preflight"') :]
    assert "concurrency 4 exceeds what this target showed" in section
    assert "use concurrency ≤ 1" in section
    assert "this server reports no usage when streaming: cost unknown" in section
    not_run = html[
        html.index('id="plan-not-run"') : html.index("</div>", html.index("plan-not-run"))
    ]
    assert f"{too_long} question" in not_run
    assert f"target smollm2 showed (preflight #{preflight.pk})" in not_run
    cases = int(re.search(r"(\d+) questions ×", html).group(1))
    assert cases == len(estimates) - too_long
    assert Run.objects.count() == 0 and Call.objects.count() == 0  # no call, nothing started


def test_a_plan_within_what_the_target_showed_is_not_warned(client, member):
    """issue 39 item 1: concurrency 1 on a target whole up to 1 gets no concurrency warning;
    a target never checked says so."""
    source_prepare(benchmark="mmlu-pro", profile="smoke")
    target = f.target_create(slug="smollm2", model="smollm2", prices={})
    _showed(target, stream_usage=True)
    html = client.post("/runs/new/", _review_form("1")).content.decode()
    assert "exceeds what this target showed" not in html
    assert "preflight #" in html and "showed nothing this plan exceeds" in html
    TargetPreflight.objects.all().delete()
    html = client.post("/runs/new/", _review_form("1")).content.decode()
    assert "smollm2: never checked" in html


def test_a_preflight_of_another_endpoint_does_not_apply():
    """issue 39 item 2: a preflight is about the endpoint and model it checked; after the
    target moves, its context no longer leaves cases out (and applies while it matches)."""
    dataset = es.fixture_dataset(["mmlu-pro"])
    target = f.target_create(slug="smollm2", model="smollm2", prices={})
    stale = _showed(target, context_tokens=5, base_url="http://127.0.0.1:1/v1")
    frozen = plan_freeze(data={"name": "p", "dataset": dataset.pk, "targets": ["smollm2"]})
    assert "not_run" not in frozen.manifest
    stale.base_url = target.base_url
    stale.save()
    with pytest.raises(PlanError) as refused:  # every case is longer than 5 tokens
        plan_freeze(data={"name": "p", "dataset": dataset.pk, "targets": ["smollm2"]})
    assert "longer than the 5-token context" in str(refused.value.errors)


def test_api_quotes_first_and_only_an_operator_sends(client):
    """issue 39 item 1: GET quotes (nothing sent); a member's POST is refused; an operator's
    POST without the quote is refused with the quote in the detail."""
    target = f.target_create(slug="smollm2", base_url="http://127.0.0.1:1/v1")
    member = f.user_create(username="m")
    client.force_login(member)
    read = client.get("/api/v1/targets/smollm2/preflight/").json()
    assert read["latest"] is None and read["quote"]["planned_calls"] == 9
    body = {"confirm_worst_case_usd": read["quote"]["worst_case_usd"]}
    refused = client.post(
        "/api/v1/targets/smollm2/preflight/", body, content_type="application/json"
    )
    assert refused.status_code == 403 and refused.json()["code"] == "not_operator"
    client.force_login(f.user_create(username="op", staff=True))
    wrong = client.post(
        "/api/v1/targets/smollm2/preflight/",
        {"confirm_worst_case_usd": "0"},
        content_type="application/json",
    )
    assert wrong.status_code == 422 and wrong.json()["code"] == "cost_not_confirmed"
    assert wrong.json()["detail"]["quote"]["worst_case_usd"] == read["quote"]["worst_case_usd"]
    assert not TargetPreflight.objects.filter(target=target).exists()


def test_cli_targets_check_refuses_without_yes_and_prints_the_quote(capsys):
    """issue 39 item 1: `benchmark targets check SLUG` quotes the worst case first and, not
    confirmed, sends nothing."""
    f.user_create(username="op", staff=True)
    f.target_create(slug="smollm2", base_url="http://127.0.0.1:1/v1")
    code, out, err = bench(capsys, "targets", "check", "smollm2", "--user", "op")
    assert code != 0
    assert out.startswith("preflight of smollm2: up to 9 tiny calls")
    assert "add --yes" in err
    assert not TargetPreflight.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_cli_targets_check_sends_once_and_reports_in_words_and_json(capsys):
    """issue 39 item 1: with --yes the preflight runs; words and JSON say the same findings."""
    f.user_create(username="op", staff=True)
    model = {"ttft_s": 0.5, "tokens_per_second": 40.0, "faults": ["cut-on-concurrent"]}
    with running_simulator(models={"sim-weak": model}) as url:
        f.target_create(
            slug="weak",
            model="sim-weak",
            base_url=f"{url}/v1",
            prices={"sim-weak": {"input": "1", "output": "2"}},
        )
        code, out, err = bench(
            capsys, "targets", "check", "weak", "--yes", "--user", "op", "--json"
        )
        stats = httpx.get(f"{url}/_sim/stats").json()
    assert code == 0, err
    assert err.startswith("preflight of weak: up to 9 tiny calls")
    document = json.loads(out)
    assert document["facts"]["cuts_at"] == 2 and document["facts"]["max_whole_streams"] == 1
    assert len(document["calls"]) == stats["chat_requests"] == 5
    assert set(stats["by_call_id"].values()) == {1}
    assert any("use concurrency ≤ 1" in x["effect"] for x in document["findings"])


def test_numbers_count_as_their_digit_groups_in_the_prompt_estimate():
    """600 ten-digit numbers were 600 tokens to the estimate (a number was one word) where
    SmolLM2's tokenizer makes 6,643 (an outside probe against llama.cpp): a case that could
    not fit a 4,096-token context was sent and failed. A number is now at least one token per
    group of three digits — a lower bound for every tokenizer that splits by one or three
    digits — so the estimate stays below what any of them makes."""
    from runs.preflight.plan import MESSAGE_TOKENS, REPLY_TOKENS, prompt_token_estimate

    numbers = " ".join(str(1_000_000_000 + i) for i in range(600))  # ten digits each
    estimate = prompt_token_estimate([{"role": "user", "content": numbers}])
    assert estimate == 600 * 4 + MESSAGE_TOKENS + REPLY_TOKENS  # ⌈10 / 3⌉ groups a number
    # Words and punctuation as before: one token a run.
    words = prompt_token_estimate([{"role": "user", "content": "What is 2+2? Answer: B."}])
    assert words == len(["What", "is", "2", "+", "2", "?", "Answer", ":", "B", "."]) + 6


def test_the_api_and_cli_plan_review_warn_as_the_page_does(client, member, capsys):
    """An outside probe: preflight found "streams cut at 2 concurrent", and `benchmark plan`
    and the API's plan review at concurrency 4 said nothing; the run then failed at once. The
    API's review lists the warnings per target and the CLI prints them."""
    dataset = es.fixture_dataset(["mmlu-pro"])
    target = f.target_create(slug="smollm2", model="smollm2", prices={})
    _showed(target)  # cut at 2, whole up to 1, no usage in streams
    plan = {"name": "p", "dataset": dataset.pk, "targets": ["smollm2"]}
    cut = {**plan, "limits": {"concurrency": 4}}
    body = client.post("/api/v1/plans/review/", cut, content_type="application/json").json()
    warned = [w["warning"] for w in body["preflight_warnings"] if w["target"] == "smollm2"]
    assert any("concurrency 4 exceeds what this target showed" in w for w in warned), body
    code, out, _ = bench(
        capsys,
        "plan",
        "--dataset",
        str(dataset.pk),
        "--target",
        "smollm2",
        "--concurrency",
        "4",
        "--user",
        "member",
    )
    assert code == 0
    assert "warning: smollm2: concurrency 4 exceeds what this target showed" in out
    # Within what it showed: no concurrency warning.
    within = {**plan, "limits": {"concurrency": 1}}
    body = client.post("/api/v1/plans/review/", within, content_type="application/json").json()
    assert not any("exceeds" in w["warning"] for w in body["preflight_warnings"]), body


def test_an_output_limit_not_below_the_context_is_warned(client, member):
    """vLLM refuses a request whose prompt plus max_tokens exceeds the context; the default
    max_output_tokens (4,096) equals a small model's whole context (SmolLM2 at 4,096)."""
    dataset = es.fixture_dataset(["mmlu-pro"])
    target = f.target_create(slug="smollm2", model="smollm2", prices={})
    _showed(target, context_tokens=4096, cuts_at=None)
    plan = {"name": "p", "dataset": dataset.pk, "targets": ["smollm2"]}

    def warned(max_output_tokens: int) -> list[str]:
        limits = {"max_output_tokens": max_output_tokens}
        body = client.post(
            "/api/v1/plans/review/", {**plan, "limits": limits}, content_type="application/json"
        ).json()
        return [w["warning"] for w in body["preflight_warnings"]]

    assert any("max_output_tokens 4,096 is not below the 4,096-token" in w for w in warned(4096))
    assert not any("max_output_tokens" in w for w in warned(512))


def test_a_prompt_plus_its_output_limit_past_the_context_is_warned(client, member, capsys):
    """A case whose estimated prompt fits a small context but not once its output limit is
    added was not flagged (only an output limit reaching the context alone was): vLLM refuses
    such a call (prompt + max_tokens > context), so the plan review names those cases, with
    the output limit that fits them all; the CLI prints it."""
    from runs.preflight.plan import prompt_token_estimate

    dataset = es.fixture_dataset(["mmlu-pro"])
    rows = DatasetQuestion.objects.filter(dataset=dataset).values_list(
        "question__benchmark", "question__native_id", "question__payload"
    )
    estimates = sorted(
        ((prompt_token_estimate(get_adapter(b).messages(p)), f"{b}/{n}") for b, n, p in rows),
        reverse=True,
    )
    longest, shortest = estimates[0][0], estimates[-1][0]
    assert longest > shortest, estimates  # the fixture's prompts differ in length
    context = longest + 5  # every prompt fits alone: none is left out as not run
    target = f.target_create(slug="smollm2", model="smollm2", prices={})
    _showed(target, context_tokens=context, cuts_at=None, stream_usage=True)
    plan = {"name": "p", "dataset": dataset.pk, "targets": ["smollm2"]}

    def warned(output: int) -> list[str]:
        body = client.post(
            "/api/v1/plans/review/",
            {**plan, "limits": {"max_output_tokens": output}},
            content_type="application/json",
        ).json()
        assert "not_run" not in body["manifest"], body
        return [w["warning"] for w in body["preflight_warnings"] if "case(s)" in w["warning"]]

    output = context - shortest  # the shortest prompt plus this fits exactly; longer ones not
    over = [e for e in estimates if e[0] + output > context]
    assert 0 < len(over) < len(estimates)
    (warning,) = warned(output)
    assert warning.startswith(
        f"{len(over)} of {len(estimates)} case(s) are estimated longer than the {context:,}-token "
        f"context this target showed once their max_output_tokens {output:,} is added "
        f"(the longest: {longest:,} + {output:,}; {over[0][1]}"
    ), warning
    assert warning.endswith(
        "refuses those calls and fails their cells; max_output_tokens ≤ 5 fits them all"
    )
    assert warned(5) == []  # prompt + output ≤ context for every case: nothing said

    code, out, _ = bench(
        capsys, "plan", "--dataset", str(dataset.pk), "--target", "smollm2",
        "--max-output-tokens", str(output), "--user", "member",
    )  # fmt: skip
    assert code == 0 and f"warning: smollm2: {len(over)} of {len(estimates)} case(s)" in out

    # A target's fixed max_tokens is what the engine sends: it is the one added.
    target.fixed_params = {"max_tokens": output}
    target.save()
    (warning,) = warned(5)
    assert f"once their max_tokens {output:,} (fixed for this target) is added" in warning
    assert warning.endswith("max_tokens ≤ 5 fits them all")
