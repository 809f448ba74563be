"""The run report as typed values (issue 24 point 3), and its one edge to JSON.

`runs.reporting.report` computes a :class:`Report`: Decimal for money, exact Fractions for accuracies
and scores, floats for intervals and timings, datetimes for times, None for unknown (never 0).
Consumers in the code (the comparison, the Run page, the stored-report columns) read these
values; text appears only at the edges: :func:`report_doc` is the JSON the API, the CLI and
the stored row (`runs.models.RunReport.report_json`) hold, and :meth:`Report.from_doc`
rebuilds the typed report from that JSON exactly (money from its exact text, scores from their
exact fractions), so a stored report reads back as the report that was computed.

Field names are the JSON keys, so a template reads ``t.subject_cost_usd`` from either and its
``money``/``usd`` filters write the Decimal as the same exact text (`srbench.money`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.utils import timezone

from datasets.provenance import UNKNOWN
from runs.models import Run, UsageCorrection
from srbench.money import money_text

BENCHMARK_COUNTS = (
    "planned",
    "questions",
    "completed",
    "correct",
    "scored",
    "failed",
    "pending",
    "sent_unknown",
    "cancelled",
)
RUN_COUNTS = ("planned", "completed", "correct", "scored", "failed", "pending", "sent_unknown")
COUNT_FIELDS = (*RUN_COUNTS, "cancelled")
TIMING_FIELDS = ("ttft_p50_ms", "latency_p50_ms", "latency_p95_ms", "request_seconds_sum")
# A target's money, in the report's key order (each with its known partial beside it).
TARGET_MONEY = (
    "subject_cost_usd",
    "known_cost_usd",
    "evaluation_cost_usd",
    "known_evaluation_cost_usd",
    "total_spend_usd",
    "known_total_spend_usd",
    "cache_neutral_cost_usd",
)
RUN_MONEY = ("total_spend_usd", "known_total_spend_usd", "waste_usd", "known_waste_usd")


def _dec(text: str | None) -> Decimal | None:
    """Money back from the exact text `money_text` wrote (the stored doc's edge)."""
    return None if text is None else Decimal(text)


def _when(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    """One benchmark of a target: its counts, accuracy over the planned cases (exact) and the
    Wilson interval over its questions. ``routing`` is a preview run's routing distribution
    (``has_routing`` says whether the row carries one, even an empty one). ``provenance`` is
    where the benchmark's questions came from, in words (`datasets.provenance`)."""

    planned: int
    questions: int
    completed: int
    correct: int
    scored: int
    failed: int
    pending: int
    sent_unknown: int
    cancelled: int
    accuracy: Fraction | None
    wilson_95: tuple[float, float] | None
    complete: bool
    routing: Mapping[str, Any] | None = None
    has_routing: bool = False
    provenance: str = UNKNOWN

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {k: getattr(self, k) for k in BENCHMARK_COUNTS}
        doc["accuracy"] = None if self.accuracy is None else float(self.accuracy)
        doc["wilson_95"] = None if self.wilson_95 is None else list(self.wilson_95)
        doc["complete"] = self.complete
        doc["provenance"] = self.provenance
        if self.has_routing:
            doc["routing"] = self.routing
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> BenchmarkRow:
        # The accuracy is correct / planned by definition: rebuilt exactly, not from its float.
        known = doc["accuracy"] is not None
        wilson = doc["wilson_95"]
        return cls(
            **{k: doc[k] for k in BENCHMARK_COUNTS},
            accuracy=Fraction(doc["correct"], doc["planned"]) if known else None,
            wilson_95=None if wilson is None else (wilson[0], wilson[1]),
            complete=doc["complete"],
            routing=doc.get("routing"),
            has_routing="routing" in doc,
            # A document stored before provenance was reported: unknown, never guessed.
            provenance=doc.get("provenance", UNKNOWN),
        )


# A subset score's label (SPEC R4.2): a WEIGHTED mean, sr-bench's weights rescaled to the
# benchmarks present (srbench.stats.weighted_quality), not an unweighted (macro) average.
SUBSET_LABEL = (
    "selected-benchmark weighted subset average (sr-bench weights rescaled to these "
    "benchmarks; not an sr-bench score)"
)
NOT_RUN_SUBSET_LABEL = (
    "weighted subset average over the questions that could run here (sr-bench weights "
    "rescaled to these benchmarks; not an sr-bench score)"
)


@dataclass(frozen=True, slots=True)
class Score:
    """The sr-bench composite (``kind`` "sr-bench"), a labelled weighted subset average
    ("subset", over ``benchmarks``), or none; ``exact`` is the weighted quality."""

    kind: str
    exact: Fraction | None = None
    label: str | None = None
    benchmarks: tuple[str, ...] | None = None

    @property
    def value(self) -> float | None:
        return None if self.exact is None else float(self.exact)

    def to_doc(self) -> dict[str, Any]:
        if self.kind == "sr-bench":
            return {"kind": self.kind, "value": self.value, "exact": str(self.exact)}
        if self.kind == "subset":
            return {
                "kind": self.kind,
                "label": self.label,
                "benchmarks": list(self.benchmarks or ()),
                "value": self.value,
                "exact": str(self.exact),
            }
        doc: dict[str, Any] = {"kind": self.kind, "value": None}
        if self.label is not None:
            doc["label"] = self.label
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Score:
        exact = doc.get("exact")
        benchmarks = doc.get("benchmarks")
        return cls(
            kind=doc["kind"],
            exact=None if exact is None else Fraction(exact),
            label=doc.get("label"),
            benchmarks=None if benchmarks is None else tuple(benchmarks),
        )


@dataclass(frozen=True, slots=True)
class OfficialSection:
    """A target's official scorers beside the sr-bench score (`runs.reporting.official_report`): per
    benchmark the summary `datasets.official` gives (floats for figures and intervals, the exact
    fraction as text where it has one, None for unknown), never part of the score."""

    note: str
    benchmarks: dict[str, dict[str, Any]]

    def to_doc(self) -> dict[str, Any]:
        return {"note": self.note, "benchmarks": self.benchmarks}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> OfficialSection | None:
        return None if doc is None else cls(doc["note"], dict(doc["benchmarks"]))


@dataclass(frozen=True, slots=True)
class TargetReport:
    """One target of a run: counts (``correct``/``scored`` None for a preview run), the
    benchmarks, the score, the four token classes (None unless every planned cell's usage is
    known; beside them the known partial sums), costs (Decimal; a total None unless complete,
    beside it the known partial), timings, a MoM target's routing and the official scorers."""

    slug: str
    kind: str
    model: str
    planned: int
    completed: int
    correct: int | None
    scored: int | None
    failed: int
    pending: int
    sent_unknown: int
    cancelled: int
    benchmarks: dict[str, BenchmarkRow]
    score: Score
    tokens: dict[str, int | None]
    tokens_known_partial: dict[str, int | None]
    subject_cost_usd: Decimal | None
    known_cost_usd: Decimal | None
    evaluation_cost_usd: Decimal | None
    known_evaluation_cost_usd: Decimal | None
    total_spend_usd: Decimal | None
    known_total_spend_usd: Decimal | None
    cache_neutral_cost_usd: Decimal | None
    cache_neutral_unknown_reason: str | None
    ttft_p50_ms: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    request_seconds_sum: float | None
    # Present for a MoM target and a preview run only (absent from the JSON otherwise).
    selected_models: Mapping[str, int] | None = None
    selected_decisions: Mapping[str, int] | None = None
    official: OfficialSection | None = None
    # Why tokens and cost are unknown or only known at least, said once per target: the server
    # sent no usage while streaming (issue 39, `runs.ledger.accounting.no_stream_usage_reason`),
    # the streams' usage is a gateway's estimate (`gateway_estimate_reason`), a gateway re-sent
    # calls upstream (`gateway_resent_reason`); None otherwise.
    usage_unknown_reason: str | None = None
    # Why the known tokens and cost may still be wrong: answered through a gateway that no
    # check frozen in the plan looked at (`runs.ledger.accounting.gateway_unchecked_caution`).
    usage_caution: str | None = None
    # Completed subject answers with no content, no reasoning and no tool call (graded as
    # given; None while the run is live), and what that may mean when there are any
    # (`runs.reporting.report.empty_answers_note`).
    empty_answers: int | None = None
    empty_answers_note: str | None = None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "slug": self.slug,
            "kind": self.kind,
            "model": self.model,
            **{k: getattr(self, k) for k in COUNT_FIELDS},
            "benchmarks": {b: row.to_doc() for b, row in self.benchmarks.items()},
            "score": self.score.to_doc(),
            "tokens": dict(self.tokens),
            "tokens_known_partial": dict(self.tokens_known_partial),
            **{k: money_text(getattr(self, k)) for k in TARGET_MONEY},
            "cache_neutral_unknown_reason": self.cache_neutral_unknown_reason,
            "usage_unknown_reason": self.usage_unknown_reason,
            "usage_caution": self.usage_caution,
            "empty_answers": self.empty_answers,
            "empty_answers_note": self.empty_answers_note,
            **{k: getattr(self, k) for k in TIMING_FIELDS},
        }
        if self.selected_models is not None:
            doc["selected_models"] = dict(self.selected_models)
            doc["selected_decisions"] = dict(self.selected_decisions or {})
        doc["official"] = None if self.official is None else self.official.to_doc()
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> TargetReport:
        return cls(
            slug=doc["slug"],
            kind=doc["kind"],
            model=doc["model"],
            **{k: doc[k] for k in COUNT_FIELDS},
            benchmarks={b: BenchmarkRow.from_doc(row) for b, row in doc["benchmarks"].items()},
            score=Score.from_doc(doc["score"]),
            tokens=dict(doc["tokens"]),
            tokens_known_partial=dict(doc["tokens_known_partial"]),
            **{k: _dec(doc[k]) for k in TARGET_MONEY},
            cache_neutral_unknown_reason=doc["cache_neutral_unknown_reason"],
            usage_unknown_reason=doc.get("usage_unknown_reason"),
            usage_caution=doc.get("usage_caution"),
            empty_answers=doc.get("empty_answers"),
            empty_answers_note=doc.get("empty_answers_note"),
            **{k: doc[k] for k in TIMING_FIELDS},
            selected_models=doc.get("selected_models"),
            selected_decisions=doc.get("selected_decisions"),
            official=OfficialSection.from_doc(doc.get("official")),
        )


@dataclass(frozen=True, slots=True)
class Counts:
    """The run's counts over its targets; one a target leaves unknown stays unknown."""

    planned: int
    completed: int
    correct: int | None
    scored: int | None
    failed: int
    pending: int
    sent_unknown: int
    cancelled: int

    def to_doc(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in COUNT_FIELDS}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Counts:
        return cls(**{k: doc[k] for k in COUNT_FIELDS})


@dataclass(frozen=True, slots=True)
class Spend:
    """The run's spend over every call of every role, and its waste (failed and unknown-outcome
    calls). A total is None unless complete; a known part is None when no cost of it is known."""

    total_spend_usd: Decimal | None
    known_total_spend_usd: Decimal | None
    waste_usd: Decimal | None
    known_waste_usd: Decimal | None
    waste_calls: int
    waste_calls_cost_unknown: int
    # Calls a gateway re-sent upstream (`runs.ledger.accounting.gateway_resent_reason`): the
    # total is then unknown and the known sum a lower bound ("at least").
    gateway_resent_calls: int = 0

    def to_doc(self) -> dict[str, Any]:
        return {
            **{k: money_text(getattr(self, k)) for k in RUN_MONEY},
            "waste_calls": self.waste_calls,
            "waste_calls_cost_unknown": self.waste_calls_cost_unknown,
            "gateway_resent_calls": self.gateway_resent_calls,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Spend:
        return cls(
            **{k: _dec(doc[k]) for k in RUN_MONEY},
            waste_calls=doc["waste_calls"],
            waste_calls_cost_unknown=doc["waste_calls_cost_unknown"],
            gateway_resent_calls=doc.get("gateway_resent_calls", 0),
        )


@dataclass(frozen=True, slots=True)
class RunHead:
    """The run's identity and times; ``wall_seconds`` runs to now while it has not finished."""

    id: int
    name: str
    status: str
    mode: str
    profile: str
    plan_sha256: str
    parent: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    wall_seconds: float | None
    stop_reason: str | None
    # A re-judge child (and a recovery of one): the run whose subject answers it judged — they
    # were bought there, and that run's report holds what they cost; this run sent no subject
    # call (its own subject spend is a known 0). None for any other run.
    answers_of: int | None = None

    def to_doc(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "mode": self.mode,
            "profile": self.profile,
            "plan_sha256": self.plan_sha256,
            "parent": self.parent,
            "created_at": self.created_at.isoformat(),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "wall_seconds": self.wall_seconds,
            "stop_reason": self.stop_reason,
            "answers_of": self.answers_of,
        }

    @classmethod
    def of_run(cls, run: Run) -> RunHead:
        """The run's identity and times; wall seconds run to now while it has not finished."""
        wall = None
        if run.started_at:
            wall = ((run.finished_at or timezone.now()) - run.started_at).total_seconds()
        return cls(
            id=run.pk,
            name=run.name,
            status=run.status,
            mode=run.mode,
            profile=run.profile,
            plan_sha256=run.plan_sha256,
            parent=run.parent_id,
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            wall_seconds=wall,
            stop_reason=run.stop_reason or None,
            answers_of=(run.manifest.get("rejudge") or {}).get("parent_run"),
        )

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> RunHead:
        created = _when(doc["created_at"])
        assert created is not None
        return cls(
            **{k: doc[k] for k in ("id", "name", "status", "mode", "profile", "plan_sha256")},
            parent=doc["parent"],
            created_at=created,
            started_at=_when(doc["started_at"]),
            finished_at=_when(doc["finished_at"]),
            wall_seconds=doc["wall_seconds"],
            stop_reason=doc["stop_reason"],
            answers_of=doc.get("answers_of"),
        )


@dataclass(frozen=True, slots=True)
class Correction:
    """The usage correction in effect (R2.3): its hash, time, counts and known costs. The one
    home of its JSON (`runs.reporting.reconcile.correction_summary` gives this for a stored row)."""

    version: int
    evidence_sha256: str
    created_at: datetime
    verified: int
    changed: int
    unverifiable: int
    old_known_cost_usd: Decimal | None
    new_known_cost_usd: Decimal | None

    @classmethod
    def of(cls, correction: UsageCorrection | None) -> Correction | None:
        if correction is None:
            return None
        return cls(
            version=correction.version,
            evidence_sha256=correction.evidence_sha256,
            created_at=correction.created_at,
            verified=correction.verified_count,
            changed=correction.changed_count,
            unverifiable=correction.unverifiable_count,
            old_known_cost_usd=correction.old_known_cost_usd,
            new_known_cost_usd=correction.new_known_cost_usd,
        )

    def to_doc(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "evidence_sha256": self.evidence_sha256,
            "created_at": self.created_at.isoformat(),
            "verified": self.verified,
            "changed": self.changed,
            "unverifiable": self.unverifiable,
            "old_known_cost_usd": money_text(self.old_known_cost_usd),
            "new_known_cost_usd": money_text(self.new_known_cost_usd),
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> Correction | None:
        if doc is None:
            return None
        created = _when(doc["created_at"])
        assert created is not None
        return cls(
            version=doc["version"],
            evidence_sha256=doc["evidence_sha256"],
            created_at=created,
            verified=doc["verified"],
            changed=doc["changed"],
            unverifiable=doc["unverifiable"],
            old_known_cost_usd=_dec(doc["old_known_cost_usd"]),
            new_known_cost_usd=_dec(doc["new_known_cost_usd"]),
        )


@dataclass(frozen=True, slots=True)
class Report:
    """A run's report (R1): complete only when nothing is in ``incomplete_reasons``."""

    run: RunHead
    incomplete_reasons: tuple[str, ...]
    # Questions the plan left out because they cannot run on this server (never counted as
    # planned, failed or wrong): benchmark, reason and how many, as the manifest froze them.
    not_run: tuple[Mapping[str, Any], ...]
    counts: Counts
    targets: tuple[TargetReport, ...]
    usage_correction: Correction | None
    spend: Spend

    @property
    def complete(self) -> bool:
        return not self.incomplete_reasons

    @property
    def denominator(self) -> int:
        return self.counts.planned

    def target(self, slug: str) -> TargetReport | None:
        return next((t for t in self.targets if t.slug == slug), None)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Report:
        """The report a stored JSON document holds (exactly: see the module docstring)."""
        return cls(
            run=RunHead.from_doc(doc["run"]),
            incomplete_reasons=tuple(doc["incomplete_reasons"]),
            not_run=tuple(doc["not_run"]),
            counts=Counts.from_doc(doc["counts"]),
            targets=tuple(TargetReport.from_doc(t) for t in doc["targets"]),
            usage_correction=Correction.from_doc(doc["usage_correction"]),
            spend=Spend.from_doc(doc["spend"]),
        )


def report_doc(report: Report) -> dict[str, Any]:
    """The report as JSON (the API's, the CLI's and the stored row's): money as its exact
    text, exact fractions as text beside their floats, times in ISO 8601, unknown as null."""
    correction = report.usage_correction
    return {
        "run": report.run.to_doc(),
        "complete": report.complete,
        "incomplete_reasons": list(report.incomplete_reasons),
        "not_run": list(report.not_run),
        "denominator": report.denominator,
        "counts": report.counts.to_doc(),
        "targets": [t.to_doc() for t in report.targets],
        "usage_correction": None if correction is None else correction.to_doc(),
        "model_requests": 0,
        "spend": report.spend.to_doc(),
    }
