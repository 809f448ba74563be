"""The headline question in one sentence (issue 35): does a candidate keep the baseline's
quality at lower cost?

Read from a comparison document (`compare.services.comparison_build`, the JSON the API answers),
so the demo, the CLI and the page say the same thing. The answer's quality part follows THE
verdict (`compare.verdict`) and nothing else, and it says "Yes" only when the subject cost is
known to be lower as well (`_answer`) and no side's known costs may be a gateway's estimate
(`compare.results.savings_caution`, said at the sentence's end); the sentence then names the
margin, the family-wise interval with its level and n, and the subject-cost savings beside the
cache-neutral ones (R3.2) — or why a figure is unknown. Nothing here computes a statistic; figures are worded by the shared presenters
(srbench/money.py, srbench/presenters.py), as on the page.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from srbench.figures_text import level_text, signed_interval_text
from srbench.money import UNKNOWN_TEXT, percent_text, usd_text

# The answer to "does it keep the quality at lower cost?", by verdict word when the subject
# cost is lower; a kept quality without a lower cost is not a "Yes" (`_answer`).
ANSWERS = {
    "better": "Yes, and better",
    "non_inferior": "Yes",
    "inconclusive": "Not shown",
    "worse": "No",
}
# The quality kept (better or non-inferior), the cost higher or the same / unknown.
QUALITY_KEPT = {"better": "Better quality", "non_inferior": "Quality kept"}


class NoSuchCandidate(LookupError):
    pass


def candidate_entry(doc: dict[str, Any], target: str, run: int | None = None) -> dict[str, Any]:
    """The comparison of ``target`` (in ``run``, when given) with the baseline."""
    for c in doc["comparisons"]:
        if c["target"] == target and (run is None or c["run"] == run):
            return c
    compared = ", ".join(f"run {c['run']} / {c['target']}" for c in doc["comparisons"])
    raise NoSuchCandidate(f"{target} is not among the compared candidates ({compared or 'none'})")


def _verdict_words(c: dict[str, Any]) -> str:
    word = c["verdict"]
    if word == "non_inferior":
        return f"non-inferior with the margin {c['verdict_margin']} fixed before the run"
    if word == "better":
        return "better: its whole family-wise interval lies above 0"
    if word == "worse":
        return "worse: its whole family-wise interval lies below 0"
    if c["verdict_margin"] is not None:
        return (
            f"inconclusive: non-inferiority with the margin {c['verdict_margin']} fixed before "
            "the run is not shown"
        )
    # The rule's reason ends with why no margin could apply (compare.verdict.verdict_decide).
    why = c["verdict_reason"].rpartition("non-inferiority not shown — ")[2]
    return f"inconclusive, and non-inferiority cannot be shown: {why}"


def _cache_neutral_words(savings: dict[str, Any]) -> str:
    """The cache-neutral savings beside the measured ones (R3.2): measured costs move with the
    cache a run found warm — in the demo the router, asked after the single models, read twice
    their cached tokens — and this rate prices every input token alike."""
    pct = savings["cache_neutral_pct"]
    if pct is None:
        return "cache-neutral savings unknown"
    if Decimal(pct) == 0:
        return "cache-neutral cost the same"
    if pct.startswith("-"):
        return f"cache-neutral {percent_text(pct.removeprefix('-'))} higher"
    return f"cache-neutral {percent_text(pct)} lower"


def _cost_words(doc: dict[str, Any], c: dict[str, Any]) -> str:
    savings = c["savings"]
    pct = savings["subject_cost_pct"]
    own, base = c["usage"]["subject_cost_usd"], doc["baseline"]["subject_cost_usd"]
    if pct is None:
        why = savings["subject_cost_unknown_reason"] or "a subject cost is unknown"
        return f"savings unknown: {why}"
    neutral = _cache_neutral_words(savings)
    costs = f"{usd_text(own)} vs {usd_text(base)}; {neutral}"
    if Decimal(pct) == 0:
        return f"the same subject cost ({usd_text(own)} each; {neutral})"
    if pct.startswith("-"):
        return f"subject cost {percent_text(pct.removeprefix('-'))} higher ({costs})"
    return f"subject cost {percent_text(pct)} lower ({costs})"


def _answer(c: dict[str, Any]) -> str:
    """The sentence's first words: "Yes" only when the quality is kept (the verdict) *and* the
    subject cost is known to be lower; otherwise the quality part alone, saying the cost part
    is not met or not known. Inconclusive and worse answer the quality question already."""
    word = c["verdict"]
    if word not in QUALITY_KEPT:
        return ANSWERS[word]
    pct = c["savings"]["subject_cost_pct"]
    if pct is None:
        return f"{QUALITY_KEPT[word]}; lower cost not shown"
    if Decimal(pct) <= 0:
        return f"{QUALITY_KEPT[word]}, but not at lower cost"
    if c["savings"]["caution"]:  # known costs that may be a gateway's estimate
        return f"{QUALITY_KEPT[word]}; lower cost not verified"
    return ANSWERS[word]


def headline_sentence(doc: dict[str, Any], target: str, run: int | None = None) -> str:
    """One sentence: the question, the answer by verdict, the interval and n, the savings."""
    c = candidate_entry(doc, target, run)
    base = doc["baseline"]
    fam = c["family_interval"]
    split = doc.get("split") or UNKNOWN_TEXT
    benchmarks = ", ".join(b["benchmark"] for b in c["benchmarks"])
    caution = f"; {c['savings']['caution']}" if c["savings"]["caution"] else ""
    return (
        f"Does {c['target']} keep {base['target']}'s quality at lower cost? "
        f"{_answer(c)} — {_verdict_words(c)}: "
        f"Δ {c['delta']:+.4f} (quality {c['quality']:.4f} vs {base['quality']:.4f}), "
        f"{level_text(fam['level'])} family-wise interval "
        f"{signed_interval_text(fam['display_lower'], fam['display_upper'])} on {c['questions']:,} {split} "
        f"questions ({benchmarks}); {_cost_words(doc, c)}{caution}."
    )
