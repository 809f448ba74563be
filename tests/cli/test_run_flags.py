"""`benchmark plan` / `benchmark run` take every plan field the form takes (issue 23; SPEC R8
plans, R12 CLI): `--simulator BENCHMARK=SLUG` for τ³'s user, `--judge BENCHMARK=SLUG`,
`--attempts`; a refused plan is "field: message" items in words, never a Python dict repr."""

from __future__ import annotations

import json

import pytest

from runs.models import Run
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stray_doorbells():  # type: ignore[no-untyped-def]
    purge_broker()  # a created run rings the doorbell; no worker listens here
    yield
    purge_broker()


@pytest.fixture
def dataset_id() -> int:
    for slug in ("sim-strong", "sim-judge", "sim-user"):
        f.target_create(slug=slug, model=slug, prices={slug: es.PRICES["sim-judge"]})
    return es.fixture_dataset(["simpleqa", "tau3"], per_benchmark=2).pk


def test_simulator_and_judge_flags_reach_the_frozen_plan(bench, dataset_id) -> None:  # type: ignore[no-untyped-def]
    base = ["--dataset", str(dataset_id), "--target", "sim-strong"]
    r = bench(
        "plan", *base, "--judge", "simpleqa=sim-judge", "--simulator", "tau3=sim-user", "--json"
    )
    assert r.code == 0, r.err
    manifest = json.loads(r.out)["manifest"]
    assert manifest["simulators"]["tau3"]["slug"] == "sim-user"
    assert manifest["judges"]["simpleqa"]["slug"] == "sim-judge"

    r = bench(
        "run",
        *base,
        "--judge",
        "simpleqa=sim-judge",
        "--judge",
        "tau3=sim-judge",
        "--simulator",
        "tau3=sim-user",
        "--attempts",
        "2",
        "--name",
        "from the cli",
        "--detach",
    )
    assert r.code == 0, r.err
    run = Run.objects.get(name="from the cli")
    assert run.manifest["simulators"]["tau3"]["slug"] == "sim-user"
    assert run.manifest["judges"]["tau3"]["slug"] == "sim-judge"
    assert run.manifest["slots"] == 2


def test_a_refused_plan_is_field_and_message_in_words(bench, dataset_id) -> None:  # type: ignore[no-untyped-def]
    base = ["--dataset", str(dataset_id), "--target", "sim-strong"]
    for verb in (["plan"], ["run", "--detach"]):
        r = bench(*verb, *base, "--judge", "simpleqa=sim-judge")
        assert r.code == 2, r.out
        assert "simulators.tau3: a user-simulator target is required" in r.err, r.err
        assert "{" not in r.err and "[" not in r.err, r.err
        assert r.err.count("\n") == 1  # one greppable error line
    r = bench("plan", *base, "--simulator", "tau3=nobody", "--judge", "simpleqa=sim-judge")
    assert "simulators.tau3: unknown simulator target nobody" in r.err, r.err
    r = bench("plan", *base, "--concurrency", "0", "--simulator", "tau3=sim-user")
    assert "the plan is not valid: limits.concurrency: Ensure" in r.err, r.err
    r = bench("plan", *base, "--simulator", "tau3")
    assert r.code == 2 and "--simulator wants BENCHMARK=SLUG" in r.err, r.err
    assert Run.objects.count() == 0
