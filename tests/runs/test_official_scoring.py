"""Official scoring beside sr-bench's through the real engine, worker and simulator (issue 22
point 5): the plan freezes the installed template's hash, every judged case makes one more judge
call with the official template, the sr-bench grade is unchanged, and the report's official
block equals an independent computation from what the simulator states."""

from __future__ import annotations

import math
import re

import pytest

from datasets import official
from datasets.grading import parse_grids, score_arc_prize_task
from runs.models import Call, Cell
from runs.planning.services import run_create
from runs.reporting.report import run_report
from srbench.simulator.oracle import judge_verdict
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.srbench.test_no_python_repr import repr_found

pytestmark = pytest.mark.worker

BENCHMARKS = ["simpleqa", "hle", "arc"]


def test_official_scoring_beside_sr_bench_through_the_engine(celery_worker, client):
    with es.simulator(BENCHMARKS) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "official",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak"],
                "judges": {"simpleqa": "sim-judge", "hle": "sim-judge"},
                "official_scoring": ["simpleqa", "hle"],
                "slots": 2,
                "limits": {"concurrency": 8},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=180)
    assert run.status == "completed", run.stop_reason

    # The plan froze the installed template's hash.
    for b in ("simpleqa", "hle"):
        frozen = run.manifest["benchmarks"][b]["official_scoring"]
        assert frozen["available"] is True
        assert frozen["template_sha256"] == official.load_template(b).sha256
    assert "official_scoring" not in run.manifest["benchmarks"]["arc"]

    cells = list(Cell.objects.filter(run=run).select_related("question__secret", "target"))
    assert cells and all(c.status == "completed" for c in cells)
    judged = [c for c in cells if c.benchmark in ("simpleqa", "hle")]
    for c in judged:
        # Two judge calls: the sr-bench judge, then the official template.
        sequences = sorted(
            Call.objects.filter(cell=c, role="judge").values_list("sequence", flat=True)
        )
        assert sequences == [0, 1]
        # The sr-bench grade is the default and unchanged by the official one.
        assert c.correct is (c.grade["verdict"] == "correct")
        assert c.grade["official"]["status"] == "graded"

    report = run_report(run=run)
    for t in report["targets"]:
        mine = [c for c in cells if c.target.slug == t["slug"]]
        block = t["official"]["benchmarks"]

        # SimpleQA, independently: the simulator's verdict on each first attempt.
        first = sorted((c for c in mine if c.benchmark == "simpleqa" and c.slot == 0), key=_qid)
        verdicts = [judge_verdict(c.question.secret.data["answer"], c.final_answer) for c in first]
        n = len(verdicts)
        correct, incorrect = verdicts.count("correct"), verdicts.count("incorrect")
        s = block["simpleqa"]
        assert (s["graded"], s["counts"]["correct"], s["counts"]["incorrect"]) == (
            n,
            correct,
            incorrect,
        )
        overall = correct / n
        given = correct / (correct + incorrect) if correct + incorrect else None
        f_score = 0.0 if correct == 0 else 2 * overall * given / (overall + given)
        assert s["correct"] == pytest.approx(overall)
        assert s["f_score"] == pytest.approx(f_score)
        assert s["template"]["template_sha256"] == official.load_template("simpleqa").sha256

        # HLE, independently: correct per the simulator's verdict, the confidence the answer
        # states (100 when none, as the template says); one bin below 100 answers.
        first = sorted((c for c in mine if c.benchmark == "hle" and c.slot == 0), key=_qid)
        hits = [
            judge_verdict(c.question.secret.data["answer"], c.final_answer) == "correct"
            for c in first
        ]
        confs = [_stated_confidence(c.final_answer) for c in first]
        h = block["hle"]
        assert h["accuracy"] == pytest.approx(sum(hits) / len(hits))
        gap = sum(confs) / len(confs) / 100 - sum(hits) / len(hits)
        assert h["calibration_error"] == pytest.approx(math.sqrt(gap * gap))

        # ARC, independently: ARC Prize's scorer on the two attempts' parsed grids.
        by_question: dict[int, dict[int, Cell]] = {}
        for c in mine:
            if c.benchmark == "arc":
                by_question.setdefault(c.question_id, {})[c.slot] = c
        scores = []
        for attempts in by_question.values():
            outputs = attempts[0].question.secret.data["outputs"]
            grids = [parse_grids(attempts[s].final_answer, len(outputs)) or [] for s in (0, 1)]
            per_output = [
                [g[k] if k < len(g) else None for g in grids] for k in range(len(outputs))
            ]
            scores.append(score_arc_prize_task(per_output, outputs).score)
        a = block["arc"]
        assert a["attempts_per_question"] == 2
        assert a["value"] == pytest.approx(float(sum(scores) / len(scores)))

    # The Results page shows it, labelled, beside the sr-bench table, without a Python repr.
    client.force_login(f.user_create(username="member"))
    page = client.get(f"/runs/{run.pk}/?tab=results").content.decode()
    assert page.count('class="compact official-scoring"') == 2
    assert "F-score" in page and "pass@2" in page and "calibration error" in page
    assert repr_found(page) == []


def _qid(cell: Cell) -> int:
    return cell.question_id


def _stated_confidence(answer: str) -> int:
    found = re.findall(r"confidence:\s*(\d+)", answer, re.IGNORECASE)
    return int(found[-1]) if found else 100


@pytest.mark.django_db
def test_plan_freezes_the_template_hash_or_not_available_with_the_reason(monkeypatch):
    from runs.ledger.selectors import plan_worst_case_subject_cost
    from runs.planning.plans import PlanError, plan_freeze

    dataset = es.fixture_dataset(["simpleqa", "hle"])
    f.target_create(slug="subject")
    f.target_create(slug="judge", model="sim-judge")
    base = {
        "name": "p",
        "dataset": dataset.pk,
        "targets": ["subject"],
        "judges": {"simpleqa": "judge", "hle": "judge"},
    }
    plain = plan_freeze(data=base)
    # Without the option nothing is added: existing plans keep their hash.
    assert "official_scoring" not in plain.manifest["benchmarks"]["simpleqa"]
    frozen = plan_freeze(data={**base, "official_scoring": ["simpleqa"]})
    entry = frozen.manifest["benchmarks"]["simpleqa"]["official_scoring"]
    assert entry["available"] is True and entry["package"] == "inspect-evals"
    assert entry["template_sha256"] == official.load_template("simpleqa").sha256
    assert frozen.plan_sha256 != plain.plan_sha256
    assert plan_worst_case_subject_cost(frozen.manifest)["judge_calls_per_case"] == {
        "hle": 1,
        "simpleqa": 2,
    }
    with pytest.raises(PlanError) as refused:
        plan_freeze(data={**base, "benchmarks": ["simpleqa"], "official_scoring": ["hle"]})
    assert "official_scoring" in refused.value.errors

    def missing():
        raise official.TemplateUnavailable("the inspect-evals package is not installed here")

    monkeypatch.setattr(official, "_package_root", missing)
    absent = plan_freeze(data={**base, "official_scoring": ["hle"]})
    assert absent.manifest["benchmarks"]["hle"]["official_scoring"] == {
        "available": False,
        "reason": "the inspect-evals package is not installed here",
    }
    # The engine then makes no official call and records why; the report says "not available".
    from runs.engine import scoring

    template, detail = scoring.official_judge(
        "hle", absent.manifest["benchmarks"]["hle"]["official_scoring"]
    )
    assert template is None and detail == {
        "status": "not_run",
        "reason": "the inspect-evals package is not installed here",
    }
    # A template that changed since the plan is not used.
    monkeypatch.undo()
    changed = {**entry, "template_sha256": "0" * 64}
    template, detail = scoring.official_judge("simpleqa", changed)
    assert template is None and "is not the one the plan froze" in detail["reason"]


@pytest.mark.django_db
def test_the_create_form_asks_for_official_scoring_and_the_review_names_the_template(client):
    from datasets.services import source_prepare
    from tests.runs.test_form_select_all import form_data

    client.force_login(f.user_create(username="alice"))
    for benchmark in ("simpleqa", "hle"):
        source_prepare(benchmark=benchmark, profile="smoke")
    f.target_create(slug="sim-strong", name="strong", model="sim-strong")
    f.target_create(slug="sim-judge", name="judge", model="sim-judge")
    assert 'name="official_scoring"' in client.get("/runs/new/?profile=smoke").content.decode()
    data = form_data(
        benchmarks=["simpleqa", "hle"],
        judge_simpleqa="sim-judge",
        judge_hle="sim-judge",
        official_scoring=["simpleqa"],
    )
    review = client.post("/runs/new/", data).content.decode()
    assert 'id="plan-hash"' in review, review[:3000]
    sha = official.load_template("simpleqa").sha256
    assert f"+ official: {official.SIMPLEQA_SCORER_VERSION}" in review
    assert sha[:10] in review and review.count("+ official:") == 1
    assert "judge calls per case: hle 1, simpleqa 2 (sr-bench and official)" in review
    assert repr_found(review) == []
