"""The report's official entries for benchmarks asked in their official prompts (issue 37
item 3): which prompts were used (package, version, template hash), and for LiveCodeBench the
official grader's pass@1 over each question's first attempt, beside the sr-bench score."""

from __future__ import annotations

from typing import Any

from datasets.official_prompts import SOURCES, lcb_official_summary

PROVENANCE_KEYS = (
    *("label", "package", "version", "file", "template_sha256"),
    *("style", "with_background"),
)


def has_official(spec: dict[str, Any] | None) -> bool:
    """A planned benchmark with an official entry in the report: official scoring or official
    prompting frozen."""
    return bool((spec or {}).get("official_scoring") or (spec or {}).get("official_prompting"))


def prompting_provenance(frozen: dict[str, Any]) -> dict[str, Any]:
    """What a report or export names of the prompts a run used."""
    return {k: frozen[k] for k in PROVENANCE_KEYS if k in frozen}


def prompted_summary(
    benchmark: str, frozen: dict[str, Any], by_question: dict[int, dict[int, tuple[str, Any]]]
) -> dict[str, Any]:
    """One target's official entry for a benchmark asked in its official prompts."""
    provenance = prompting_provenance(frozen)
    if benchmark != "livecodebench":
        return {
            "label": SOURCES[benchmark].label,
            "value": None,
            "reason": (
                "official prompts only: these answers are graded by the sr-bench grader, in "
                "the sr-bench score"
            ),
            "questions": len(by_question),
            "prompting": provenance,
        }
    outcomes = []
    for _, attempts in sorted(by_question.items()):
        _, grade = attempts.get(0, ("", None))
        official = (grade or {}).get("official") or {}
        outcomes.append(bool(official["correct"]) if official.get("status") == "graded" else None)
    return lcb_official_summary(outcomes) | {"prompting": provenance}


SR_BENCH_PROMPTING = "sr-bench"


def run_prompting(run: Any) -> dict[str, Any]:
    """Per planned benchmark, the prompts its subjects were asked in: "sr-bench" (the
    adapter's), or the official prompts the plan froze (package, version, template hash)."""
    return {
        b: prompting_provenance(spec["official_prompting"])
        if "official_prompting" in (spec or {})
        else SR_BENCH_PROMPTING
        for b, spec in run.manifest["benchmarks"].items()
    }
