"""Shared set-up for engine tests: a frozen dataset from the bundled fixtures, a simulator
that knows their answers, and targets pointing at it."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from datasets.answer_key import answer_key_from_sources
from datasets.benchmarks import get_adapter
from datasets.models import DatasetQuestion, FrozenDataset
from datasets.services import question_content_sha256
from runs.models import Run, Target
from runs.planning.services import run_create
from srbench.canonical import sha256_hex
from srbench.simulator.config import load_config
from srbench.simulator.oracle import AnswerKey
from srbench.simulator.testing import running_simulator
from tests.datasets.factories import question_stored
from tests.factories import user_create

FAST_MODELS = {
    "sim-strong": {"ttft_s": 0.02, "tokens_per_second": 0.0},
    "sim-weak": {"ttft_s": 0.01, "tokens_per_second": 0.0},
    "sim-judge": {"ttft_s": 0.0, "tokens_per_second": 0.0},
}
PRICES = {
    "sim-strong": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"},
    "sim-weak": {"input": "0.5", "cached_input": "0.05", "cache_write": "0.6", "output": "1.5"},
    "sim-judge": {"input": "1", "cached_input": "0.1", "output": "2"},
}


def fixture_dataset(
    benchmarks: list[str], *, name: str = "fixtures", per_benchmark: int | None = None
) -> FrozenDataset:
    """A frozen dataset of the bundled fixture questions (the first `per_benchmark` of each),
    stored under the project's own content address."""
    loaded = []
    for benchmark in benchmarks:
        adapter = get_adapter(benchmark)
        loaded += adapter.load(adapter.fixture_path())[:per_benchmark]
    return questions_dataset(loaded, name=name, benchmarks=benchmarks)


def questions_dataset(questions: list[Any], *, name: str, benchmarks: list[str]) -> FrozenDataset:
    """A frozen dataset of loaded questions in order (an adapter's `load`, a package's tasks),
    each stored once under its content address, as `benchmark prepare` would."""
    hashes = []
    rows = []
    for q in questions:
        sha = question_content_sha256(q)
        rows.append(question_stored(q, sha))
        hashes.append(sha)
    dataset = FrozenDataset.objects.create(
        identity_sha256=sha256_hex([name, hashes]),
        name=name,
        profile="smoke",
        seed=1,
        split="dev",
        selection={"benchmarks": benchmarks},
    )
    DatasetQuestion.objects.bulk_create(
        DatasetQuestion(dataset=dataset, question=q, position=i) for i, q in enumerate(rows)
    )
    return dataset


def answer_key(benchmarks: list[str]) -> AnswerKey:
    return answer_key_from_sources([(b, str(get_adapter(b).fixture_path())) for b in benchmarks])


@contextlib.contextmanager
def simulator(
    benchmarks: list[str], *, key: AnswerKey | None = None, **overrides: Any
) -> Iterator[str]:
    """A simulator that knows the fixtures' answers the way a deployed one does (or answers
    from ``key``): the key saved as JSON and named by the config's ``[answer_key] file``
    (issue 24)."""
    models = {**FAST_MODELS, **overrides.pop("models", {})}
    with tempfile.TemporaryDirectory(prefix="srbench-answer-key-") as folder:
        path = Path(folder) / "answer-key.json"
        (answer_key(benchmarks) if key is None else key).save(path)
        config = load_config(None, {"answer_key": {"file": str(path)}})
        with running_simulator(config, models=models, **overrides) as url:
            yield url


def keyed_run(key: AnswerKey, dataset: FrozenDataset, name: str, *, timeout: float) -> Run:
    """One run of sim-strong over ``dataset``, answering from ``key`` (a hostile model's
    answers, say), waited for until it ends."""
    from tests.conftest import wait_until

    with simulator([], key=key, models={"sim-strong": {"ttft_s": 0.0, "accuracy": 1.0}}) as url:
        sim_targets(url)
        run, _ = run_create(
            owner=user_create(),
            plan={"name": name, "dataset": dataset.pk, "targets": ["sim-strong"]},
        )
        wait_until(lambda: terminal(run), timeout=timeout)
    return run


def sim_targets(url: str) -> dict[str, Target]:
    config_hash = httpx.get(f"{url}/api/v1/config/hash").json()
    active = config_hash["active_runtime_hash"]
    base = f"{url}/v1"
    return {
        "strong": Target.objects.create(
            slug="sim-strong",
            name="strong",
            model="sim-strong",
            base_url=base,
            prices={"sim-strong": PRICES["sim-strong"]},
        ),
        "weak": Target.objects.create(
            slug="sim-weak",
            name="weak",
            model="sim-weak",
            base_url=base,
            prices={"sim-weak": PRICES["sim-weak"]},
        ),
        "router": Target.objects.create(
            slug="sim-router",
            name="router",
            kind="mom",
            model="auto",
            base_url=base,
            config_hash=active,
            prices={k: PRICES[k] for k in ("sim-strong", "sim-weak")},
        ),
        "judge": Target.objects.create(
            slug="sim-judge",
            name="judge",
            model="sim-judge",
            base_url=base,
            prices={"sim-judge": PRICES["sim-judge"]},
        ),
        "user": Target.objects.create(
            slug="sim-user",
            name="user simulator",
            model="sim-user",
            base_url=base,
            prices={"sim-user": PRICES["sim-judge"]},
        ),
    }


def sim_stats(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/_sim/stats").json()


def terminal(run: Run) -> Run | None:
    run.refresh_from_db()
    return run if run.is_terminal else None


@contextlib.contextmanager
def worker_run(
    name: str,
    targets: list[str],
    benchmarks: list[str],
    *,
    slots: int = 2,
    concurrency: int = 4,
    models: dict[str, dict[str, float]] | None = None,
) -> Iterator[Run]:
    """A run of the fixtures of `benchmarks` on `targets` (by default two slots, concurrency
    4), created for the test's real Celery worker against a simulator whose sim-strong streams
    slowly enough that polls see the run running (or as `models` say); the simulator serves
    while the block runs."""
    slow = models or {"sim-strong": {"ttft_s": 0.05, "tokens_per_second": 200.0}}
    with simulator(benchmarks, models=slow) as url:
        sim_targets(url)
        dataset = fixture_dataset(benchmarks)
        run, _ = run_create(
            owner=user_create(),
            plan={
                "name": name,
                "dataset": dataset.pk,
                "targets": targets,
                "slots": slots,
                "limits": {"concurrency": concurrency},
            },
        )
        yield run


def agents_run(url: str, benchmarks: list[str], *, timeout: float = 240) -> Run:
    """A finished run of the fixtures of the agent `benchmarks` on sim-strong, with sim-user
    playing τ³'s user and failures continuing, against the simulator at `url` (registered
    here); waits for the test's real Celery worker to end it."""
    from tests.conftest import wait_until

    sim_targets(url)
    dataset = fixture_dataset(benchmarks)
    run, _ = run_create(
        owner=user_create(),
        plan={
            "name": "agents",
            "dataset": dataset.pk,
            "targets": ["sim-strong"],
            "simulators": {"tau3": "sim-user"},
            "failure_policy": "continue",
        },
    )
    wait_until(lambda: terminal(run), timeout=timeout)
    run.refresh_from_db()
    return run
