"""Hidden grading data never reaches a member (issue 19, points 2 and 3).

A finished run over every benchmark kind is written to the ledger as the engine writes it: the
fixture questions with distinctive markers planted in their secrets (reference answers, hidden
LiveCodeBench/SciCode tests, Terminal-Bench tests, τ³ assertions, expected values and gold
actions), grades from the real graders where they need no sandbox (τ³'s reward and the
driver's judge composition, MCQ, grid, judge verdicts, a malformed verdict, an unparsed
LiveCodeBench answer, SciCode without its test data) and in the real graders' shape where they
do (code tests, Terminal-Bench's verifier), judge calls whose request and reply quote the
reference, and the run events of failed cells.

Every registered page and API endpoint is then read by a member who is not the owner and by
the (non-staff) owner, with the htmx partials and the paged lists followed, plus the CLI's
`show`, `report` and `export`; none may contain a marker. The markers are checked to be in the
database and a rendering of the raw grades is checked to be caught, so the crawl can fail.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client

from datasets.benchmarks import get_adapter
from datasets.grading import MalformedVerdict
from datasets.models import DatasetQuestion, FrozenDataset, Question, QuestionSecret
from datasets.services import question_content_sha256
from runs.engine import code_grading, scoring, tau
from runs.interfaces.public import JUDGE_WITHHELD, MALFORMED_VERDICT, public_grade
from runs.ledger.events import events_append
from runs.models import Call, Cell, Run, RunEvent
from runs.planning.services import run_create
from srbench.canonical import sha256_hex
from tests import factories as f
from tests.datasets.test_no_secret_leak import NAMED_SECRETS, flatten_json, needles_of, strings
from tests.security.test_secret_scan import body_text, concrete_urls, leaks, registered_patterns

pytestmark = pytest.mark.django_db

BENCHMARKS = [
    "mmlu-pro",
    "gpqa",
    "simpleqa",
    "hle",
    "arc",
    "livecodebench",
    "scicode",
    "terminal-bench",
    "tau3",
]
# Planted in the secret parts of the cells; each must never reach a member.
MARKERS = {
    "simpleqa reference answer": "HIDDEN-REF-SIMPLEQA-5d1f",
    "hle reference answer": "HIDDEN-REF-HLE-8a2c",
    "judge reasoning": "HIDDEN-JUDGE-REASONING-71c0",
    "judge tool call": "HIDDEN-JUDGE-TOOL-2b44",
    "livecodebench hidden test input": "HIDDEN-LCB-INPUT-9d03",
    "livecodebench expected output": "HIDDEN-LCB-OUTPUT-61aa",
    "scicode hidden test": "HIDDEN-SCICODE-TEST-4c7e",
    "scicode host path": "HIDDEN-HOST-PATH-0f3d",
    "terminal-bench hidden test": "HIDDEN-TB-TEST-ASSERT-55e2",
    "terminal-bench reward file": "HIDDEN-TB-REWARD-RAW-aa10",
    "terminal-bench host path": "HIDDEN-TB-HOST-PATH-7b21",
    "tau3 nl assertion": "HIDDEN-NL-ASSERTION-c6d5",
    "tau3 expected value": "HIDDEN-EXPECTED-VALUE-0e8f",
    "tau3 gold action id": "HIDDEN-GOLD-ACTION-ID-b912",
    "tau3 gold action tool": "HIDDEN-GOLD-TOOL-77c3",
    "tau3 env assertion": "HIDDEN-ENV-ASSERTION-d4a6",
}
# The τ³ reward components are the grader's vocabulary (which checks a task uses), shown with
# their outcome; the data behind them is what is hidden.
TAU_COMPONENTS = {"DB", "COMMUNICATE", "ACTION", "NL_ASSERTION", "ENV_ASSERTION"}
# What a member must see: the subject's own answer and the reasons in words.
VISIBLE_ANSWER = "VISIBLE-SUBJECT-ANSWER-1a2b"
TAU_REASONS = [
    "2 of 3 expected actions missing",
    "2 of 2 required outputs not communicated",
    "the final database differs from the expected state",
    "1 expected action could not be replayed (a problem of the task's data)",
]


def _plant(benchmark: str, secret: dict[str, Any]) -> None:
    """Markers into a fixture question's secret, in the places the real data has them."""
    m = MARKERS
    if benchmark in ("simpleqa", "hle"):
        secret["answer"] = m[f"{benchmark} reference answer"]
    elif benchmark == "livecodebench":
        secret["tests"].append(
            {
                "input": f"1\n{m['livecodebench hidden test input']}\n",
                "output": f"{m['livecodebench expected output']}\n",
                "testtype": "stdin",
            }
        )
    elif benchmark == "scicode":
        secret["steps"][0]["test_cases"].append(f"assert '{m['scicode hidden test']}' == target")
    elif benchmark == "terminal-bench":
        secret["tests"][0]["content"] += f"\n# {m['terminal-bench hidden test']}\n"
    elif benchmark == "tau3":
        # On the fixture's renew_simple task (member M-1002, loan L-1): one gold action the
        # agent takes, one it misses, one the gold replay cannot run; two required outputs
        # the agent never says; one assertion for the judge; one environment assertion.
        gold = m["tau3 gold action id"]
        secret["evaluation_criteria"] = {
            "actions": [
                {
                    "action_id": f"{gold}-0",
                    "name": "get_member",
                    "arguments": {"member_id": "M-1002"},
                },
                {"action_id": f"{gold}-1", "name": "renew_loan", "arguments": {"loan_id": "L-1"}},
                {"action_id": f"{gold}-2", "name": m["tau3 gold action tool"], "arguments": {}},
            ],
            "communicate_info": [f"{m['tau3 expected value']}-a", f"{m['tau3 expected value']}-b"],
            "nl_assertions": [f"{m['tau3 nl assertion']}: the agent apologises for the wait"],
            "env_assertions": [{"func_name": m["tau3 env assertion"]}],
            "reward_basis": ["DB", "COMMUNICATE", "ACTION", "NL_ASSERTION"],
        }


def _planted_dataset() -> FrozenDataset:
    """The first fixture question of every benchmark, its secret planted (a secret never
    changes once stored, so it is planted before the question is)."""
    rows = []
    for benchmark in BENCHMARKS:
        adapter = get_adapter(benchmark)
        q = adapter.load(adapter.fixture_path())[0]
        _plant(benchmark, q.secret)
        question = Question.objects.create(
            benchmark=q.benchmark,
            native_id=q.native_id,
            subject=q.subject,
            payload=q.payload,
            content_sha256=question_content_sha256(q),
        )
        QuestionSecret.objects.create(question=question, data=q.secret)
        rows.append(question)
    dataset = FrozenDataset.objects.create(
        identity_sha256=sha256_hex(["hidden data", [q.content_sha256 for q in rows]]),
        name="hidden data",
        profile="smoke",
        seed=1,
        split="dev",
        selection={"benchmarks": BENCHMARKS},
    )
    DatasetQuestion.objects.bulk_create(
        DatasetQuestion(dataset=dataset, question=q, position=i) for i, q in enumerate(rows)
    )
    return dataset


def _call(cell: Cell, role: str, sequence: int, target: Any, **fields: Any) -> Call:
    return f.call_create(
        cell=cell, role=role, sequence=sequence, target=target, status="completed", **fields
    )


def _finish(
    cell: Cell,
    *,
    status: str = "completed",
    correct: bool | None = None,
    grade: dict[str, Any] | None = None,
    answer: str = "",
    error: str = "",
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    """As the ledger finishes a cell (runs.engine.store): the row and its event."""
    Cell.objects.filter(pk=cell.pk).update(
        status=status,
        correct=correct,
        scored=correct is not None,
        grade=grade,
        final_answer=answer,
        error=error,
    )
    payload: dict[str, Any] = {"cell": cell.pk}
    if status == "completed":
        payload["correct"] = correct
    else:
        payload["error"] = error[:500]
    events.append((f"cell.{status}", payload))


def _judged(
    cell: Cell, question: Question, subject: Any, judge: Any, slot_reply: str, events: list
) -> None:
    """A judged benchmark: the subject answers, the judge is shown the reference (real
    request) and replies; a reply that is not a verdict fails the cell quoting it."""
    secret = QuestionSecret.objects.get(question=question).data
    answer = f"{VISIBLE_ANSWER} (a guess)"
    _call(cell, "subject", 0, subject, content=answer)
    messages = scoring.judge_request_messages(
        payload=question.payload, secret=secret, answer=answer
    )
    _call(
        cell,
        "judge",
        0,
        judge,
        request={"model": judge.model, "messages": messages, "stream": True},
        content=slot_reply,
        reasoning=f"{MARKERS['judge reasoning']}: the gold target is {secret['answer']}",
        tool_calls=[
            {
                "id": "t1",
                "name": "lookup",
                "arguments": json.dumps({"q": MARKERS["judge tool call"]}),
            }
        ],
    )
    try:
        grade = scoring.grade_from_verdict(slot_reply)
    except MalformedVerdict as exc:
        _finish(
            cell,
            status="failed",
            answer=answer,
            error=f"malformed judge verdict: {exc}",
            events=events,
        )
        return
    _finish(cell, correct=grade.correct, grade=grade.detail, answer=answer, events=events)


def _tau_cells(
    cells: list[Cell], question: Question, subject: Any, user: Any, judge: Any, events: list
) -> dict[str, Any]:
    """Slot 0 as the driver leaves it without a judge (failed, not scored); slot 1 with the
    judge's verdicts on the assertions (Driver._run_tau's composition)."""
    payload = question.payload
    secret = QuestionSecret.objects.get(question=question).data
    environment = tau.TauEnvironment.from_payload(payload)
    messages = tau.first_messages(payload)
    result = environment.call_tool("get_member", '{"member_id": "M-1002"}')
    said = f"{VISIBLE_ANSWER}: I looked you up."
    messages = [
        *messages,
        tau.assistant_message(None, [{"id": "c1", "name": "get_member", "arguments": "{}"}]),
        tau.tool_message("c1", result),
        tau.assistant_message(said),
    ]
    reward = tau.tau_reward(
        payload=payload,
        secret=secret,
        environment=environment,
        agent_outputs=tau.agent_texts(messages),
        termination="user_stop",
    )
    assert reward["complete"] is False and set(reward["detail"]["not_evaluated"]) == {
        "NL_ASSERTION"
    }
    for cell in cells:
        _call(
            cell,
            "subject",
            0,
            subject,
            request={
                "model": subject.model,
                "messages": messages,
                "tools": environment.tool_schemas(),
            },
        )
        _call(
            cell,
            "simulator",
            0,
            user,
            request={"messages": tau.user_simulator_messages(payload, messages)},
            content="Thanks. ###STOP###",
        )
    detail = {"grader": "tau3", "termination": "user_stop", **reward}
    _finish(
        cells[0],
        status="failed",
        grade=detail,
        error="τ³ task has assertions this grader does not evaluate yet (not scored)",
        events=events,
    )
    assertions = reward["detail"]["not_evaluated"]["NL_ASSERTION"]
    verdicts: dict[str, bool] = {}
    for i, assertion in enumerate(assertions):
        _call(
            cells[1],
            "judge",
            i,
            judge,
            request={
                "messages": scoring.judge_messages_for(
                    question=f"Does the agent's side of this conversation satisfy: {assertion}",
                    reference=assertion,
                    response="\n\n".join(tau.agent_texts(messages)),
                )
            },
            content='{"verdict": "incorrect"}',
            reasoning=f"It never says: {assertion}",
        )
        verdicts[assertion] = False
    judged = copy.deepcopy(detail)
    components = dict(reward["detail"]["components"])
    components["NL_ASSERTION"] = all(verdicts.values())
    judged.update(reward=0, complete=True, nl_verdicts=verdicts)
    judged["detail"] = {**reward["detail"], "components": components}
    _finish(cells[1], correct=False, grade=judged, events=events)
    return reward


@pytest.fixture
def world(settings: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr("runs.planning.services.run_dispatch", lambda *, run_id: None)
    # Every planted question is planned, as on a server that holds every task's test data
    # and tools (what can run here is tests/runs/test_not_run.py's subject, not this one's).
    monkeypatch.setattr("runs.planning.runnable.not_runnable_reason", lambda *args: None)
    dataset = _planted_dataset()
    questions = {q.benchmark: q for q in dataset.questions.all()}
    assert set(questions) == set(BENCHMARKS)
    subject = f.target_create(slug="subject-a")
    judge = f.target_create(slug="judge-a")
    user = f.target_create(slug="user-sim")
    owner = f.user_create(username="owner")
    run, _ = run_create(
        owner=owner,
        plan={
            "name": "hidden data",
            "dataset": dataset.pk,
            "targets": [subject.slug],
            "judges": {"simpleqa": judge.slug, "hle": judge.slug, "tau3": judge.slug},
            "simulators": {"tau3": user.slug},
            "slots": 2,
        },
    )
    cells: dict[str, list[Cell]] = {}
    for cell in Cell.objects.filter(run=run).order_by("slot"):
        cells.setdefault(cell.benchmark, []).append(cell)
    events: list[tuple[str, dict[str, Any]]] = []
    m = MARKERS

    for benchmark in ("mmlu-pro", "gpqa"):
        q = questions[benchmark]
        for cell, answer in zip(
            cells[benchmark], ("The answer is B", "I cannot tell"), strict=True
        ):
            _call(cell, "subject", 0, subject, content=answer)
            graded = scoring.grade_direct(
                benchmark=benchmark,
                payload=q.payload,
                secret=QuestionSecret.objects.get(question=q).data,
                answer=answer,
            )
            _finish(cell, correct=graded.correct, grade=graded.detail, answer=answer, events=events)

    q = questions["arc"]
    for cell, answer in zip(cells["arc"], ("[[0, 0], [0, 0]]", "no idea"), strict=True):
        _call(cell, "subject", 0, subject, content=answer)
        graded = scoring.grade_direct(
            benchmark="arc",
            payload=q.payload,
            secret=QuestionSecret.objects.get(question=q).data,
            answer=answer,
        )
        _finish(cell, correct=graded.correct, grade=graded.detail, answer=answer, events=events)

    for benchmark in ("simpleqa", "hle"):
        reference = m[f"{benchmark} reference answer"]
        replies = (
            '{"verdict": "incorrect"}',
            f"The gold target is {reference}, so the response is INCORRECT",
        )
        for cell, reply in zip(cells[benchmark], replies, strict=True):
            _judged(cell, questions[benchmark], subject, judge, reply, events)

    q = questions["livecodebench"]
    lcb = cells["livecodebench"]
    unparsed = f"{VISIBLE_ANSWER}: I would use a loop."
    _call(lcb[0], "subject", 0, subject, content=unparsed)
    grade = code_grading.grade_livecodebench(
        answer=unparsed, payload=q.payload, secret=QuestionSecret.objects.get(question=q).data
    )
    _finish(lcb[0], correct=False, grade=grade, answer=unparsed, events=events)
    _call(lcb[1], "subject", 0, subject, content="```python\nprint(0)\n```")
    _finish(
        lcb[1],
        correct=False,
        grade={  # grade_livecodebench's shape after a wrong answer on the second test
            "grader": "livecodebench",
            "version": code_grading.LCB_GRADER_VERSION,
            "correct": False,
            "tests_total": 4,
            "tests_passed": 1,
            "tests": [
                {"index": 0, "status": "passed", "wall_s": 0.05},
                {"index": 1, "status": "wrong_answer", "wall_s": 0.04},
                {"index": 2, "status": "not_run"},
                {"index": 3, "status": "not_run"},
            ],
            "status": "failed",
        },
        answer="```python\nprint(0)\n```",
        events=events,
    )

    q = questions["scicode"]
    sci = cells["scicode"]
    settings.SRBENCH_SCICODE_H5 = f"/srv/{m['scicode host path']}/test_data.h5"
    with pytest.raises(scoring.GradingUnavailable) as unavailable:
        scoring.grade_code(
            benchmark="scicode",
            payload=q.payload,
            secret=QuestionSecret.objects.get(question=q).data,
            answers=["```python\nx = 1\n```"],
        )
    for cell in sci:
        _call(cell, "subject", 0, subject, content="```python\nx = 1\n```")
    _finish(
        sci[0],
        status="failed",
        answer="```python\nx = 1\n```",
        error=str(unavailable.value),
        events=events,
    )
    _finish(
        sci[1],
        correct=False,
        grade={  # grade_scicode's shape
            "grader": "scicode",
            "version": code_grading.SCICODE_GRADER_VERSION,
            "status": "failed",
            "correct": False,
            "steps_total": 2,
            "steps_passed": 1,
            "steps": [
                {"index": 0, "step_number": "901.1", "status": "passed", "wall_s": 0.3},
                {"index": 1, "step_number": "901.2", "status": "failed", "wall_s": 0.2},
            ],
        },
        answer="```python\nx = 1\n```",
        events=events,
    )

    tb = cells["terminal-bench"]
    _call(tb[0], "subject", 0, subject, content=f"{VISIBLE_ANSWER}: done")
    _finish(
        tb[0],
        correct=False,
        grade={  # Driver._run_terminal_bench around TerminalSession.verify's detail
            "grader": "terminal-bench",
            "reward": 0,
            "steps": 3,
            "detail": {
                "grader": "terminal-bench",
                "version": get_adapter("terminal-bench").grader_version,
                "verifier_reason": "ok",
                "verifier_exit_code": 1,
                "verifier_output_tail": (
                    f"FAILED tests/test_outputs.py::test_count - assert "
                    f"'{m['terminal-bench hidden test']}' == '2'"
                ),
                "commands_run": 3,
                "reward_source": "reward.txt",
                "reward_raw": m["terminal-bench reward file"],
            },
        },
        answer=f"{VISIBLE_ANSWER}: done",
        events=events,
    )
    _finish(
        tb[1],
        status="failed",
        error=(
            "task set-up failed: [Errno 13] Permission denied: "
            f"'/var/lib/{m['terminal-bench host path']}/task/tests'"
        ),
        events=events,
    )

    reward = _tau_cells(cells["tau3"], questions["tau3"], subject, user, judge, events)

    with transaction.atomic():
        events_append(run_id=run.pk, events=events)
    Run.objects.filter(pk=run.pk).update(status="completed")
    run.refresh_from_db()

    # Needles: the markers, the τ³ gold database hash, and every distinctive line of the
    # fixture secrets that is neither public text nor something the subject wrote or was sent.
    gold_hash = reward["detail"]["gold_db_sha256"]
    public = "\n".join(
        text
        for q in questions.values()
        for text in [q.native_id, q.subject, *strings(q.payload), json.dumps(q.payload)]
    )
    assert gold_hash not in public and gold_hash != reward["detail"]["db_sha256"]
    subject_side = "\n".join(
        json.dumps([c.request, c.content, c.reasoning, c.tool_calls], ensure_ascii=False)
        for c in Call.objects.filter(cell__run=run).exclude(role="judge")
    ) + "\n".join(Cell.objects.filter(run=run).values_list("final_answer", flat=True))
    needles: dict[str, set[str]] = {kind: {marker} for kind, marker in MARKERS.items()}
    needles["tau3 gold database hash"] = {gold_hash}
    for secret in QuestionSecret.objects.filter(question__in=questions.values()):
        found = {
            n
            for n in needles_of(secret.data)
            if n not in public and n not in subject_side and n not in TAU_COMPONENTS
        }
        needles.setdefault(secret.question.benchmark, set()).update(found)
    for benchmark, named in NAMED_SECRETS.items():
        needles.setdefault(benchmark, set()).update(n for n in named if n not in subject_side)
    return {"run": run, "owner": owner, "dataset": dataset, "needles": needles, "cells": cells}


def _member() -> Client:
    client = Client()
    client.force_login(f.user_create(username="member"))
    return client


def _owner(world: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(world["owner"])
    return client


def _crawl(client: Client, world: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """Every registered URL pattern with real ids, the tabs, the htmx partials, the paged API
    lists followed to the end and the comparison of the run with itself."""
    run: Run = world["run"]
    calls = list(Call.objects.filter(cell__run=run).values_list("pk", flat=True))
    cells = list(Cell.objects.filter(run=run).values_list("pk", flat=True))
    values = {
        "runs": [str(run.pk)],
        "calls": [str(pk) for pk in calls],
        "cells": [str(pk) for pk in cells],
        "datasets": [str(world["dataset"].pk)],
        "questions": [str(pk) for pk in world["dataset"].questions.values_list("pk", flat=True)],
        "targets": ["subject-a", "judge-a", "user-sim"],
    }
    urls: list[tuple[str, dict[str, str]]] = []
    for route, _pattern in registered_patterns():
        urls += [(u, {}) for u in concrete_urls(route, values)]
    base = f"/runs/{run.pk}/"
    urls += [(f"{base}?tab={t}", {}) for t in ("results", "questions", "calls", "evidence")]
    urls += [(f"{base}?tab=calls&call={pk}", {}) for pk in calls]
    urls += [(f"{base}?tab=evidence&read=more", {}), (f"{base}recovery/?mode=failed", {})]
    hx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "tab-body"}
    urls += [(f"{base}?tab={t}", hx) for t in ("questions", "calls", "evidence")]
    urls += [(f"{base}calls/{pk}/", {"HTTP_HX_REQUEST": "true"}) for pk in calls]
    api = f"/api/v1/runs/{run.pk}/"
    urls += [
        (f"{api}results/?limit=100", {}),
        (f"{api}calls/?limit=100", {}),
        (f"{api}events/?limit=1000", {}),
        (f"{api}export/?as=json", {}),
        (f"{api}export/?as=csv", {}),
        (f"/compare/?baseline={run.pk}&candidate={run.pk}", {}),
        (f"/api/v1/compare/?baseline={run.pk}&candidate={run.pk}", {}),
        (f"/api/v1/compare/export.json?baseline={run.pk}&candidate={run.pk}", {}),
        (f"/api/v1/compare/export.csv?baseline={run.pk}&candidate={run.pk}", {}),
    ]
    statuses: dict[str, int] = {}
    texts: dict[str, str] = {}
    for url, headers in urls:
        response = client.get(url, follow=False, **headers)  # type: ignore[arg-type]
        key = url + (" [htmx]" if headers else "")
        statuses[key] = response.status_code
        texts[key] = body_text(response)
    return statuses, texts


def _assert_no_leak(texts: dict[str, str], needles: dict[str, set[str]]) -> None:
    found = [(url, kind, n) for url, text in texts.items() for kind, n in leaks(text, needles)]
    assert not found, "\n".join(f"{u}: {k} {n!r}" for u, k, n in found[:40])


def test_the_hidden_data_is_planted_and_a_leaky_rendering_would_be_caught(world):
    run = world["run"]
    ledger = flatten_json(
        [
            list(Cell.objects.filter(run=run).values("grade", "error")),
            list(Call.objects.filter(cell__run=run).values("request", "content", "reasoning")),
            list(Call.objects.filter(cell__run=run).values_list("tool_calls", flat=True)),
            list(RunEvent.objects.filter(run=run).values_list("payload", flat=True)),
            [s.data for s in QuestionSecret.objects.all()],
        ]
    )
    for kind, marker in MARKERS.items():
        assert marker in ledger, f"{kind} was not planted"
    # The rows the pages and the API read carry the hidden data (grades, judge calls, errors,
    # events): before issue 19 they showed it.
    raw_cells = flatten_json(list(Cell.objects.filter(run=run).values("grade", "error")))
    caught = {kind for kind, _ in leaks(raw_cells, world["needles"])}
    assert {
        "tau3 nl assertion",
        "tau3 expected value",
        "tau3 gold action id",
        "tau3 gold action tool",
        "tau3 gold database hash",
        "hle reference answer",
        "scicode host path",
        "terminal-bench hidden test",
        "terminal-bench reward file",
        "terminal-bench host path",
    } <= caught
    judge_rows = flatten_json(
        list(Call.objects.filter(cell__run=run, role="judge").values("request", "content"))
    )
    assert {"simpleqa reference answer", "hle reference answer", "tau3 nl assertion"} <= {
        kind for kind, _ in leaks(judge_rows, world["needles"])
    }
    events = flatten_json(list(RunEvent.objects.filter(run=run).values_list("payload", flat=True)))
    assert "hle reference answer" in {kind for kind, _ in leaks(events, world["needles"])}
    for kind in ("livecodebench", "scicode", "terminal-bench", "tau3", "simpleqa", "hle", "arc"):
        assert world["needles"].get(kind), kind


@pytest.mark.parametrize("who", ["member", "owner"])
def test_every_page_and_api_endpoint_shows_no_hidden_data(world, who):
    client = _member() if who == "member" else _owner(world)
    statuses, texts = _crawl(client, world)
    assert not [u for u, s in statuses.items() if s >= 500], statuses
    _assert_no_leak(texts, world["needles"])
    run = world["run"]
    # The crawl saw the data: the run, every question result and call, the results API.
    assert statuses[f"/api/v1/runs/{run.pk}/results/?limit=100"] == 200
    assert statuses[f"/runs/{run.pk}/?tab=questions"] == 200
    for cell in Cell.objects.filter(run=run):
        assert statuses[f"/runs/{run.pk}/questions/{cell.pk}/"] == 200
    for call in Call.objects.filter(cell__run=run):
        assert statuses[f"/runs/{run.pk}/calls/{call.pk}/"] == 200
        assert statuses[f"/api/v1/runs/{run.pk}/calls/{call.pk}/"] == 200
    # ... and it is not blind: what a member may see is there.
    everything = "\n".join(texts.values())
    assert VISIBLE_ANSWER in texts[f"/api/v1/runs/{run.pk}/results/?limit=100"]
    assert all(reason in everything for reason in TAU_REASONS)
    assert MALFORMED_VERDICT in everything
    if who == "owner":  # exporting a run is for its owner and operators
        assert statuses[f"/api/v1/runs/{run.pk}/export/?as=json"] == 200
        assert VISIBLE_ANSWER in texts[f"/api/v1/runs/{run.pk}/export/?as=csv"]


def test_the_cli_shows_no_hidden_data(world, capsys):
    run = world["run"]
    out = []
    for args in (
        ["show", str(run.pk)],
        ["show", str(run.pk), "--results", "--limit", "100"],
        ["show", str(run.pk), "--results", "--limit", "100", "--json"],
        ["show", str(run.pk), "--calls", "--limit", "100", "--json"],
        ["show", str(run.pk), "--events", "--json"],
        ["report", str(run.pk), "--json"],
        ["export", str(run.pk), "--format", "json"],
        ["export", str(run.pk), "--format", "csv"],
    ):
        capsys.readouterr()
        try:
            call_command("benchmark", *args, "--user", "owner")
        except SystemExit as exc:
            assert not exc.code, (args, capsys.readouterr())
        out.append(capsys.readouterr().out)
    text = "\n".join(out)
    assert VISIBLE_ANSWER in text and TAU_REASONS[0] in text
    _assert_no_leak({"cli": text}, world["needles"])


def test_a_judge_call_withholds_request_and_reply_in_the_api_as_on_the_page(world):
    run = world["run"]
    client = _member()
    judges = list(Call.objects.filter(cell__run=run, role="judge"))
    assert len(judges) == 5  # SimpleQA and HLE twice each, one τ³ assertion
    for call in judges:
        body = client.get(f"/api/v1/runs/{run.pk}/calls/{call.pk}/").json()
        assert body["withheld"] == JUDGE_WITHHELD
        assert [body[k] for k in ("request", "content", "reasoning", "tool_calls")] == [None] * 4
        assert body["role"] == "judge" and body["status"] == "completed"
        page = client.get(f"/runs/{run.pk}/calls/{call.pk}/").content.decode()
        assert 'id="request-withheld"' in page and 'id="call-answer"' not in page
    subject = Call.objects.filter(cell__run=run, role="subject", content__contains=VISIBLE_ANSWER)
    call = subject.first()
    assert call is not None
    body = client.get(f"/api/v1/runs/{run.pk}/calls/{call.pk}/").json()
    assert body["withheld"] is None and VISIBLE_ANSWER in body["content"]
    assert body["request"] == call.request
    page = client.get(f"/runs/{run.pk}/calls/{call.pk}/").content.decode()
    assert 'id="request-withheld"' not in page and VISIBLE_ANSWER in page


def test_members_read_their_verdict_in_words_without_the_hidden_criteria(world):
    run = world["run"]
    client = _member()
    results = {
        r["id"]: r
        for r in client.get(f"/api/v1/runs/{run.pk}/results/?limit=100").json()["results"]
    }
    unjudged, judged = world["cells"]["tau3"]
    left = results[unjudged.pk]
    assert left["status"] == "failed" and left["correct"] is None
    assert set(TAU_REASONS) <= set(left["reasons"])
    assert "1 natural-language assertion left to the judge (not scored)" in left["reasons"]
    assert left["grade"]["expected_actions_missing"] == 2
    assert left["grade"]["components"]["NL_ASSERTION"] == "not evaluated"
    done = results[judged.pk]
    assert "0 of 1 natural-language assertion judged satisfied" in done["reasons"]
    assert done["grade"]["nl_assertions_unjudged"] == 0
    page = client.get(f"/runs/{run.pk}/questions/{unjudged.pk}/").content.decode()
    assert "2 of 3 expected actions missing" in page and 'id="grade-reasons"' in page
    hle_wrong, hle_malformed = world["cells"]["hle"]
    assert results[hle_malformed.pk]["error"] == MALFORMED_VERDICT
    assert results[hle_wrong.pk]["reasons"] == ["judge verdict: incorrect"]
    tb = results[world["cells"]["terminal-bench"][0].pk]
    assert tb["reasons"] == ["the task's tests did not pass"]
    assert tb["grade"]["verifier_exit_code"] == 1 and "verifier_output_tail" not in tb["grade"]
    lcb = results[world["cells"]["livecodebench"][1].pk]
    assert lcb["reasons"] == ["1 of 4 hidden tests passed", "first failure: wrong answer"]
    assert re.search(r"<path>", results[world["cells"]["terminal-bench"][1].pk]["error"])
    # Searching the loaded results cannot probe the stored error for hidden text.
    for marker in (MARKERS["hle reference answer"], MARKERS["scicode host path"]):
        page = client.get(f"/runs/{run.pk}/", {"tab": "questions", "q": marker})
        assert 'id="question-results"' not in page.content.decode()


def test_a_field_a_grader_adds_later_stays_hidden_until_it_is_named():
    grade = {
        "grader": "livecodebench",
        "status": "failed",
        "correct": False,
        "tests": [{"index": 0, "status": "wrong_answer", "expected": "HIDDEN"}],
        "expected_output": "HIDDEN",
    }
    shown = public_grade(grade)
    assert "HIDDEN" not in json.dumps(shown)
    assert shown == {
        "grader": "livecodebench",
        "status": "failed",
        "correct": False,
        "tests": [{"index": 0, "status": "wrong_answer"}],
    }
    assert public_grade({"grader": "new-grader", "status": "ok", "answer": "HIDDEN"}) == {
        "grader": "new-grader",
        "status": "ok",
    }
