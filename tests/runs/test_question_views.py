"""The run page's per-question views (issue 35 item 7, build 6): the Questions tab filtered by
target, benchmark and outcome; every target's answer and verdict side by side with a
failures-only filter; the transcript of a τ³ / Terminal-Bench episode; and the run page's
export, compare and CLI actions — through the Django test client, on cells written by the
factories and, for the episodes and the hidden-data check, by the real engine."""

from __future__ import annotations

import html as htmllib
import re
import shlex

import pytest
from django.core.management import call_command
from django.test import Client

from datasets.models import QuestionSecret
from runs.models import Call, Cell, Run
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.runs.test_pages import manifest_for

pytestmark = pytest.mark.django_db

FAILING = {"wrong", "failed", "sent_unknown"}


@pytest.fixture
def member(client):
    user = f.user_create(username="member")
    client.force_login(user)
    return user


def outcome_of(cell: Cell) -> str:
    """The outcome words' key, computed here from status and correct (not from runs.interfaces.questions)."""
    if cell.status != "completed":
        return {"failed": "failed", "sent_unknown": "sent_unknown", "cancelled": "cancelled"}.get(
            cell.status, "unfinished"
        )
    return {True: "correct", False: "wrong", None: "not_scored"}[cell.correct]


def two_target_run(owner, *, questions: int = 30, status: str = "completed") -> Run:
    """Two targets over `questions` mmlu-pro and 4 gpqa questions, outcomes varied by index:
    strong right on all but every 7th, weak wrong on every 3rd, failed on every 5th."""
    strong = f.target_create(slug="strong")
    weak = f.target_create(slug="weak")
    run = f.run_create(
        owner=owner,
        status=status,
        name="side",
        manifest=manifest_for([strong, weak], benchmarks=("mmlu-pro", "gpqa")),
    )
    for i in range(questions + 4):
        benchmark = "mmlu-pro" if i < questions else "gpqa"
        q = f.question_create(benchmark=benchmark, native_id=f"{benchmark}/{i}")
        f.cell_create(
            run=run,
            question=q,
            target=strong,
            status="completed",
            scored=True,
            correct=i % 7 != 0,
            final_answer=f"strong says {i}",
        )
        failed = i % 5 == 0
        f.cell_create(
            run=run,
            question=q,
            target=weak,
            status="failed" if failed else "completed",
            scored=not failed,
            correct=None if failed else i % 3 != 0,
            final_answer="" if failed else f"weak says {i}",
            error="transport: connection reset" if failed else "",
        )
    return run


def rows_of(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<tr data-target="([^"]+)" data-benchmark="([^"]+)">', html)


def test_questions_tab_filters_by_target_benchmark_and_outcome(client, member):
    """issue 35 item 7: each filter narrows what is read; together they intersect."""
    run = two_target_run(member)
    cells = list(Cell.objects.filter(run=run).select_related("target").order_by("pk"))
    url = f"/runs/{run.pk}/?tab=questions"

    html = client.get(f"{url}&target=weak&outcome=wrong").content.decode()
    expected = [c for c in cells if c.target.slug == "weak" and outcome_of(c) == "wrong"]
    assert 0 < len(expected) < 25
    assert rows_of(html) == [("weak", c.benchmark) for c in expected]
    assert "selected>weak</option>" in html and 'value="wrong" selected' in html

    html = client.get(f"{url}&benchmark=gpqa").content.decode()
    assert rows_of(html) == [(c.target.slug, "gpqa") for c in cells if c.benchmark == "gpqa"]

    html = client.get(f"{url}&outcome=failed&benchmark=mmlu-pro").content.decode()
    expected = [c for c in cells if outcome_of(c) == "failed" and c.benchmark == "mmlu-pro"]
    assert [r[0] for r in rows_of(html)] == [c.target.slug for c in expected] != []
    assert (
        "No result matches these filters"
        in client.get(f"{url}&target=strong&outcome=failed").content.decode()
    )


def test_an_invalid_filter_is_named_and_the_valid_ones_still_apply(client, member):
    """issue 35 item 7: one mistyped value never silently drops every filter."""
    run = two_target_run(member)
    html = client.get(f"/runs/{run.pk}/?tab=questions&target=nope&benchmark=gpqa").content
    html = html.decode()
    assert "“nope” is not a target of this run" in html and "strong, weak" in html
    assert rows_of(html) and {b for _, b in rows_of(html)} == {"gpqa"}
    html = client.get(f"/runs/{run.pk}/?tab=questions&outcome=great&target=weak").content.decode()
    assert "“great” is not an outcome of this run" in html
    assert rows_of(html) and {t for t, _ in rows_of(html)} == {"weak"}


def test_filters_survive_htmx_swaps_search_and_pages(client, member):
    """issue 35 item 7: the partial answer keeps the filters in its pager, search and cursor."""
    run = two_target_run(member, questions=60)
    response = client.get(
        f"/runs/{run.pk}/?tab=questions&target=strong",
        headers={"HX-Request": "true", "HX-Target": "tab-body"},
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="tab-body"') and "<html" not in html
    nxt = re.search(r'<a href="([^"]+)">Next 25 →</a>', html).group(1)
    assert "target=strong" in htmllib.unescape(nxt)
    assert '<input type="hidden" name="target" value="strong">' in html  # the search keeps it
    page2 = client.get(f"/runs/{run.pk}/{htmllib.unescape(nxt)}").content.decode()
    assert rows_of(page2) and {t for t, _ in rows_of(page2)} == {"strong"}
    assert "Page 2 of 3" in page2  # 64 strong results, 25 a page


def side_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="side-row[^"]*" data-question="([^"]+)"', html)


def test_side_by_side_puts_every_target_in_a_row_and_keeps_only_failures(client, member):
    """issue 35 item 7: failures only = at least one target wrong or failed; disagree = one
    right and another failing; each computed here from the cells."""
    run = two_target_run(member, questions=20)
    by_question: dict[str, dict[str, str]] = {}
    for c in Cell.objects.filter(run=run).select_related("target", "question").order_by("pk"):
        by_question.setdefault(c.question.native_id, {})[c.target.slug] = outcome_of(c)
    url = f"/runs/{run.pk}/side-by-side/"

    html = client.get(url).content.decode()
    assert side_rows(html) == list(by_question)[:25]
    first = re.search(r'data-question="mmlu-pro/1".*?</tr>', html, re.S).group(0)
    assert 'data-target="strong" data-outcome="correct"' in first and "strong says 1" in first
    assert 'data-target="weak" data-outcome="correct"' in first and "weak says 1" in first

    failing = [q for q, o in by_question.items() if set(o.values()) & FAILING]
    html = client.get(f"{url}?failures=1").content.decode()
    assert side_rows(html) == failing and 0 < len(failing) < len(by_question)
    assert f"<strong>{len(failing)}</strong> questions matching" in html
    assert "transport: connection reset" in html

    disagree = [
        q for q, o in by_question.items() if "correct" in o.values() and set(o.values()) & FAILING
    ]
    html = client.get(f"{url}?disagree=1").content.decode()
    assert side_rows(html) == disagree and 0 < len(disagree) < len(failing)
    assert html.count("targets disagree</span>") == len(disagree)

    html = client.get(f"{url}?failures=1&benchmark=gpqa").content.decode()
    assert side_rows(html) == [q for q in failing if q.startswith("gpqa/")]
    html = client.get(f"{url}?failures=1&benchmark=nope").content.decode()
    assert "“nope” is not a benchmark of this run" in html and side_rows(html) == failing
    partial = client.get(f"{url}?failures=1", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<section id="side-by-side"') and "<html" not in partial


def cli_commands(html: str) -> list[list[str]]:
    found = re.findall(r'<pre class="cli-command" id="cli-\d+">([^<]+)</pre>', html)
    return [shlex.split(htmllib.unescape(c)) for c in found]


def test_run_page_offers_export_compare_and_a_cli_command_that_works(
    client, member, capsys, tmp_path
):
    """issue 35 item 7: the export links answer the matrix, Compare opens with this run
    preselected, and the CLI commands shown run as shown."""
    run = two_target_run(member, questions=3)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    csv_url = htmllib.unescape(re.search(r'id="export-csv" href="([^"]+)"', html).group(1))
    response = client.get(csv_url)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "strong.correct" in response.content.decode()
    json_url = htmllib.unescape(re.search(r'id="export-json" href="([^"]+)"', html).group(1))
    assert client.get(json_url).json()["run"] == run.pk

    compare = htmllib.unescape(re.search(r'id="compare-run" href="([^"]+)"', html).group(1))
    assert compare == f"/compare/?baseline={run.pk}&candidates={run.pk}"
    assert client.get(compare).status_code == 200

    commands = cli_commands(html)
    assert commands[0][:3] == ["python", "manage.py", "benchmark"]
    assert commands[0][3:] == ["report", str(run.pk), "--user", "member"]
    assert any(c[3] == "export" for c in commands)
    assert commands[-1] == ["srbench", "report", str(run.pk), "--url", "http://testserver"]
    written = tmp_path / f"run-{run.pk}.csv"
    for argv in commands[:-1]:
        argv = [str(written) if a == f"run-{run.pk}.csv" else a for a in argv]
        try:
            call_command(*argv[2:])
        except SystemExit as exc:
            assert not exc.code, (argv, capsys.readouterr())
    out = capsys.readouterr().out
    assert f"#{run.pk}" in out or f"run {run.pk}" in out.lower(), out[:500]
    assert "strong.correct" in written.read_text()


def test_run_page_says_why_a_run_cannot_be_exported_or_compared(client, member):
    """issue 35 item 7: a running run, or another member's, says why instead of a dead link."""
    run = two_target_run(member, questions=2, status="running")
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="export-csv"' not in html and 'id="compare-run"' not in html
    assert "only a completed run can be exported; this run is running" in html
    assert "Compare takes ended live runs" in html
    other = f.user_create(username="other")
    run.status = "completed"
    run.save(update_fields=["status"])
    reader = Client()
    reader.force_login(other)
    html = reader.get(f"/runs/{run.pk}/").content.decode()
    assert "only the run&#x27;s owner or an operator may export it" in html
    assert reader.get(f"/api/v1/runs/{run.pk}/export/?as=csv").status_code == 403


# --- agent episodes through the real engine ------------------------------------------------------

GOLD_MARKER = "HIDDEN-GOLD-ACTION-9f1e"
REFERENCE_MARKER = "HIDDEN-REFERENCE-ANSWER-4c2a"


def planted_dataset(benchmarks: list[str]):
    """The bundled fixtures (3 a benchmark) with unique strings in their hidden parts: τ³ gold
    action ids, SimpleQA reference answers. Secrets are immutable once stored, so the markers
    go in before the questions are (their content address covers them)."""
    import copy
    import dataclasses

    from datasets.benchmarks import get_adapter
    from datasets.models import DatasetQuestion, FrozenDataset, Question
    from datasets.services import question_content_sha256
    from srbench.canonical import sha256_hex

    rows, hashes = [], []
    for benchmark in benchmarks:
        adapter = get_adapter(benchmark)
        for q in adapter.load(adapter.fixture_path())[:3]:
            secret = copy.deepcopy(q.secret)
            if benchmark == "tau3":
                for i, action in enumerate(secret["evaluation_criteria"].get("actions") or []):
                    action["action_id"] = f"{GOLD_MARKER}-{i}"
            elif benchmark == "simpleqa":
                secret["answer"] = REFERENCE_MARKER
            q = dataclasses.replace(q, secret=secret)
            sha = question_content_sha256(q)
            question = Question.objects.create(
                content_sha256=sha,
                benchmark=q.benchmark,
                native_id=q.native_id,
                subject=q.subject,
                payload=q.payload,
            )
            QuestionSecret.objects.create(question=question, data=secret)
            rows.append(question)
            hashes.append(sha)
    dataset = FrozenDataset.objects.create(
        identity_sha256=sha256_hex(["planted", hashes]),
        name="planted",
        profile="smoke",
        seed=1,
        split="dev",
        selection={"benchmarks": benchmarks},
    )
    DatasetQuestion.objects.bulk_create(
        DatasetQuestion(dataset=dataset, question=q, position=i) for i, q in enumerate(rows)
    )
    return dataset


def episode_run(benchmarks: list[str]) -> Run:
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        dataset = planted_dataset(benchmarks)
        run, _ = run_create_plan(dataset)
        wait_until(lambda: es.terminal(run), timeout=240)
    return run


def run_create_plan(dataset) -> tuple[Run, bool]:
    from runs.planning.services import run_create

    return run_create(
        owner=f.user_create(username="owner"),
        plan={
            "name": "episodes",
            "dataset": dataset.pk,
            "targets": ["sim-strong", "sim-weak"],
            "simulators": {"tau3": "sim-user"},
            "judges": {"simpleqa": "sim-judge"},
            "failure_policy": "continue",
        },
    )


def in_order(html: str, pieces: list[str]) -> bool:
    at = 0
    for piece in pieces:
        found = html.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


@pytest.mark.worker
def test_a_tau3_episode_shows_every_turn_in_order_and_no_hidden_value(celery_worker):
    """issue 35 item 7: the transcript shows the agent's messages, tool calls with arguments,
    tool results and the simulated user's messages in order; no page of the new views shows a
    gold action id, a reference answer or a judge's traffic (runs.interfaces.public)."""
    run = episode_run(["tau3", "simpleqa"])
    # τ³ tasks whose assertions need a judge end failed (not scored): the run may say failed.
    cells = list(Cell.objects.filter(run=run).values_list("benchmark", "status", "error"))
    assert run.is_terminal and not run.stop_reason, (cells, celery_worker.log()[-3000:])
    assert any(GOLD_MARKER in str(s.data) for s in QuestionSecret.objects.all())
    client = Client()
    client.force_login(run.owner)
    cell = (
        Cell.objects.filter(run=run, benchmark="tau3", calls__tool_calls__isnull=False)
        .distinct()
        .first()
    )
    calls = list(Call.objects.filter(cell=cell).order_by("pk"))
    assert {c.role for c in calls} >= {"subject", "simulator"}
    expected: list[str] = []
    for call in calls:
        if call.role == "subject":
            expected += [f"call #{call.pk}"]
            expected += [htmllib.escape(t["name"]) for t in call.tool_calls or []]
        elif call.role == "simulator":
            expected += [f"call #{call.pk}", htmllib.escape(call.content[:40])]
    last = [c for c in calls if c.role == "subject"][-1]
    tool_results = [m["content"] for m in last.request["messages"] if m["role"] == "tool"]
    assert tool_results
    html = client.get(f"/runs/{run.pk}/questions/{cell.pk}/transcript/").content.decode()
    assert in_order(html, expected), expected
    for text in tool_results:
        assert htmllib.escape(text[:60]) in html
    assert html.count('data-kind="tool_result"') == len(tool_results)
    page = client.get(f"/runs/{run.pk}/questions/{cell.pk}/").content.decode()
    assert "No answer recorded" not in page and "An agent episode" in page
    assert in_order(page, expected)

    urls = [
        f"/runs/{run.pk}/side-by-side/",
        f"/runs/{run.pk}/side-by-side/?failures=1",
        f"/runs/{run.pk}/?tab=questions",
        f"/runs/{run.pk}/?tab=questions&benchmark=simpleqa",
        f"/runs/{run.pk}/",
    ]
    for c in Cell.objects.filter(run=run):
        urls.append(f"/runs/{run.pk}/questions/{c.pk}/")
        urls.append(f"/runs/{run.pk}/questions/{c.pk}/transcript/")
    judge = Call.objects.filter(cell__run=run, role="judge").first()
    assert judge is not None and REFERENCE_MARKER in str(judge.request)
    for url in urls:
        body = client.get(url).content.decode()
        assert GOLD_MARKER not in body and REFERENCE_MARKER not in body, url
