"""What `make demo` sets up beyond processes: demo data, simulator config and targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from datasets.models import FrozenDataset
from runs.models import Target
from srbench.simulator.config import DEFAULT_CONFIG_PATH

# Illustrative list prices (USD per 1M tokens) so the demo shows costs and savings.
DEMO_PRICES = {
    "sim-strong": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"},
    "sim-weak": {"input": "0.25", "cached_input": "0.025", "cache_write": "0.3", "output": "1.25"},
    "sim-judge": {"input": "0.5", "cached_input": "0.05", "output": "1.5"},
}
DEMO_JUDGED = ("simpleqa", "hle", "tau3")
# Code and agent benchmarks come from the bundled self-authored fixtures (official formats).
FIXTURE_BENCHMARKS = ("livecodebench", "scicode", "terminal-bench", "tau3")


def demo_dataset(var_dir: Path) -> FrozenDataset:
    """All nine benchmarks at the smoke profile: synthetic files for the five that have a
    generator, bundled fixtures for the four code and agent benchmarks."""
    from datasets.services import dataset_compose, demo_datasets_prepare, source_prepare

    generated = demo_datasets_prepare(profile="smoke", work_dir=var_dir / "demo-data")
    fixtures = [source_prepare(benchmark=b, profile="smoke") for b in FIXTURE_BENCHMARKS]
    return dataset_compose(
        sources=[*generated.sources.all(), *fixtures], name="demo · smoke · all nine benchmarks"
    )


def scicode_test_data(var_dir: Path) -> Path:
    """Targets for the bundled SciCode problems, so SciCode is graded in the demo."""
    from datasets.scicode_fixture_data import write_fixture_test_data

    return write_fixture_test_data(var_dir / "demo-data" / "scicode" / "test_data.h5")


def simulator_config(dataset: FrozenDataset, var_dir: Path) -> Path:
    """The bundled simulator config plus an answer key read from the demo's own files, so the
    simulated models answer the demo questions with their configured accuracy."""
    sources = [
        [s.benchmark, s.provenance["source_path"]] for s in dataset.sources.order_by("benchmark")
    ]
    path = var_dir / "simulator.toml"
    path.write_text(
        DEFAULT_CONFIG_PATH.read_text() + "\n[answer_key]\nsources = " + json.dumps(sources) + "\n"
    )
    return path


def demo_targets(simulator_url: str) -> list[Target]:
    """Register (or point again) the demo targets at this demo's simulator."""
    hashes = httpx.get(f"{simulator_url}/api/v1/config/hash", timeout=10).json()
    base = f"{simulator_url}/v1"
    specs: list[dict[str, Any]] = [
        {
            "slug": "sim-strong",
            "name": "Simulated strong model",
            "model": "sim-strong",
            "prices": {"sim-strong": DEMO_PRICES["sim-strong"]},
        },
        {
            "slug": "sim-weak",
            "name": "Simulated cheap model",
            "model": "sim-weak",
            "prices": {"sim-weak": DEMO_PRICES["sim-weak"]},
        },
        {
            "slug": "sim-router",
            "name": "Simulated MoM router",
            "model": "auto",
            "kind": "mom",
            "config_hash": hashes["active_runtime_hash"],
            "preview_url": f"{simulator_url}/api/v1/routing/preview",
            "prices": {k: DEMO_PRICES[k] for k in ("sim-strong", "sim-weak")},
        },
        {
            "slug": "sim-judge",
            "name": "Simulated judge",
            "model": "sim-judge",
            "prices": {"sim-judge": DEMO_PRICES["sim-judge"]},
        },
        {
            "slug": "sim-user",
            "name": "Simulated user (τ³)",
            "model": "sim-user",
            "prices": {"sim-user": DEMO_PRICES["sim-judge"]},
        },
    ]
    targets = []
    for spec in specs:
        slug = spec.pop("slug")
        target, _ = Target.objects.update_or_create(
            slug=slug, defaults={"base_url": base, "kind": "single", "active": True, **spec}
        )
        targets.append(target)
    return targets


# Benchmarks whose grading runs model-written code in the sandbox (bubblewrap).
SANDBOXED = ("livecodebench", "scicode", "terminal-bench")


def demo_benchmarks(dataset: FrozenDataset, *, sandbox: bool) -> tuple[list[str], list[str]]:
    """(benchmarks to run, benchmarks not run) — without a sandbox on this machine the code and
    agent benchmarks are left out of the plan before any model call, never failed or scored 0."""
    present = sorted(set(dataset.sources.values_list("benchmark", flat=True)))
    skipped = [] if sandbox else [b for b in present if b in SANDBOXED]
    return [b for b in present if b not in skipped], skipped


def demo_plan(dataset: FrozenDataset, benchmarks: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": "demo smoke evaluation",
        "dataset": dataset.pk,
        **({"benchmarks": benchmarks} if benchmarks is not None else {}),
        "targets": ["sim-strong", "sim-weak", "sim-router"],
        "judges": {b: "sim-judge" for b in DEMO_JUDGED},
        "simulators": {"tau3": "sim-user"},
        "limits": {"concurrency": 16},
    }
