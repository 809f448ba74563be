"""Official scorers reported beside the sr-bench ones (issue 22 point 5).

The sr-bench-compatible graders (`datasets.grading`) stay the composite's default. Beside them,
labelled "official", a run can report:

* ARC-AGI-2 — ARC Prize pass@2 per test output: an output counts if either of the question's
  first two attempts matched it exactly; a task scores the mean over its outputs.
* SimpleQA — the official grader template (A/B/C = correct / incorrect / not attempted), with
  correct-given-attempted and the F-score (harmonic mean of correct and correct-given-attempted).
* HLE — the official CAIS judge (extracted answer, correct yes/no, stated confidence), accuracy
  and RMS calibration error.

Judge templates are never written here: they are read at run time from the installed package
that carries them (`inspect-evals`), by parsing its source with `ast` — the package is not
imported (importing it would pull inspect_ai). Its template hash is frozen into the plan; a
template that changed since the plan is not used. Without the package, official scoring is "not
available here" with the reason — null, never 0, never a paraphrase.

The pure computations below take plain values, so tests check them against hand-computed
numbers; `runs.reporting.report` reads the cells and calls them.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from srbench.canonical import sha256_hex
from srbench.stats import Z_95, wilson_interval

OFFICIAL_PACKAGE = "inspect-evals"
OFFICIAL_MODULE = "inspect_evals"
SIMPLEQA_SCORER_VERSION = "simpleqa-official/1"
HLE_SCORER_VERSION = "hle-official/1"
ARC_SCORER_VERSION = "arc-prize-pass@2/1"

# Where each official template lives in the package, and the module-level constants that make
# it up. SimpleQA: the grader template (`{question}`, `{criterion}`, `{answer}`,
# `{instructions}`) and its A/B/C instructions, as inspect_evals' original-paper scorer formats
# them. HLE: CAIS's judge prompt (`{question}`, `{response}`, `{correct_answer}`), the one its
# JSON judge sends, verbatim including its upstream typos.
_SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "simpleqa": (
        "simpleqa/grader_templates.py",
        ("SIMPLEQA_GRADER_TEMPLATE", "SIMPLEQA_GRADING_INSTRUCTIONS"),
    ),
    "hle": ("hle/prompts.py", ("JSON_OUTPUT_PROMPT",)),
}
OFFICIAL_JUDGED = tuple(_SOURCES)
LABELS = {
    "simpleqa": "SimpleQA official grader (simple-evals template A/B/C, F-score)",
    "hle": "HLE official judge (CAIS judge prompt, accuracy and RMS calibration error)",
    "arc": "ARC Prize pass@2 per test output",
}

# Intervals: Wilson for proportions (n as stated beside each); percentile bootstrap, seeded, for
# the F-score and the calibration error, which are not proportions.
BOOTSTRAP_DRAWS = 2000
# The calibration bootstrap re-sorts every resample (~0.7 s for 2,500 answers at 1,000 draws).
CALIBRATION_BOOTSTRAP_DRAWS = 1000
BOOTSTRAP_SEED = 0
HLE_CALIBRATION_BIN = 100  # CAIS `calib_err(..., beta=100)`; inspect_evals uses min(100, n)


class TemplateUnavailable(Exception):
    """The official template cannot be read here; the message is the reason shown."""


class MalformedOfficialVerdict(ValueError):
    """The judge's reply to an official template is not in the template's format."""


@dataclass(frozen=True)
class OfficialTemplate:
    benchmark: str
    package: str
    version: str
    file: str  # path inside the package
    constants: dict[str, str]
    sha256: str  # of the canonical JSON of `constants`
    scorer: str

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "available": True,
            "scorer": self.scorer,
            "package": self.package,
            "version": self.version,
            "file": self.file,
            "template_sha256": self.sha256,
        }


def unavailable_entry(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def _literal(node: ast.AST) -> str | None:
    """A string literal, a literal with `.strip()`, or a `Prompt(..., prompt=...)` call's prompt."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call):
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "strip"
            and not node.args
            and not node.keywords
        ):
            inner = _literal(func.value)
            return None if inner is None else inner.strip()
        for kw in node.keywords:
            if kw.arg == "prompt":
                return _literal(kw.value)
    return None


def _package_root() -> Path:
    # find_spec of a top-level name locates it without executing it.
    spec = importlib.util.find_spec(OFFICIAL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise TemplateUnavailable(
            f"the {OFFICIAL_PACKAGE} package, which carries the official template, is not "
            "installed here (make install adds it)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=16)
def _parse(path: str, mtime_ns: int, size: int, names: tuple[str, ...]) -> dict[str, str]:
    source = Path(path).read_bytes()
    tree = ast.parse(source, filename=path)
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in names:
                text = _literal(node.value)
                if text is None:
                    raise TemplateUnavailable(f"{target.id} in {path} is not a literal string")
                found[target.id] = text
    missing = [n for n in names if n not in found]
    if missing:
        raise TemplateUnavailable(f"{', '.join(missing)} not found in {path}")
    return found


def load_template(benchmark: str, *, root: Path | None = None) -> OfficialTemplate:
    """The official template of a judged benchmark, read from the installed package's source.
    Raises TemplateUnavailable with the reason when it cannot be read here."""
    if benchmark not in _SOURCES:
        raise TemplateUnavailable(f"{benchmark} has no official judge template")
    relpath, names = _SOURCES[benchmark]
    base = root if root is not None else _package_root()
    path = base / relpath
    if not path.is_file():
        raise TemplateUnavailable(f"{relpath} is not in the installed {OFFICIAL_PACKAGE}")
    stat = path.stat()
    constants = _parse(str(path), stat.st_mtime_ns, stat.st_size, names)
    try:
        version = importlib.metadata.version(OFFICIAL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return OfficialTemplate(
        benchmark=benchmark,
        package=OFFICIAL_PACKAGE,
        version=version,
        file=relpath,
        constants=dict(constants),
        sha256=sha256_hex(constants),
        scorer=SIMPLEQA_SCORER_VERSION if benchmark == "simpleqa" else HLE_SCORER_VERSION,
    )


def manifest_entry(benchmark: str) -> dict[str, Any]:
    """What a plan freezes for a benchmark whose official scoring was asked for."""
    try:
        return load_template(benchmark).manifest_entry()
    except TemplateUnavailable as exc:
        return unavailable_entry(str(exc))


# ---------------------------------------------------------------------------------------------
# The official judge call


def official_messages(
    template: OfficialTemplate, *, question: str, reference: str, response: str
) -> list[dict[str, str]]:
    """One user message, the official template filled in as the package fills it."""
    c = template.constants
    if template.benchmark == "simpleqa":
        text = c["SIMPLEQA_GRADER_TEMPLATE"].format(
            question=question,
            criterion=reference,
            answer=response,
            instructions=c["SIMPLEQA_GRADING_INSTRUCTIONS"],
        )
    else:
        text = c["JSON_OUTPUT_PROMPT"].format(
            question=question, response=response, correct_answer=reference
        )
    return [{"role": "user", "content": text}]


SIMPLEQA_GRADES = {"A": "correct", "B": "incorrect", "C": "not_attempted"}


def parse_simpleqa_grade(text: str) -> str:
    """The template asks for the letter alone. Anything but exactly "A", "B" or "C" (after
    whitespace) is malformed: simple-evals would read the first A/B/C anywhere, or "C" when
    there is none; here an unreadable reply stays unscored rather than becoming a grade."""
    letter = text.strip()
    if letter not in SIMPLEQA_GRADES:
        raise MalformedOfficialVerdict(f"not one of A, B, C: {text[:200]!r}")
    return SIMPLEQA_GRADES[letter]


_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)
HLE_FIELDS = {"extracted_final_answer", "reasoning", "correct", "confidence"}


def parse_hle_judgement(text: str) -> dict[str, Any]:
    """CAIS's `ExtractedAnswer` as one JSON object (bare or in one ```json fence): exactly its
    fields (plus its `strict: true`), `correct` "yes" or "no", `confidence` an integer, clamped
    to 0..100 as inspect_evals does."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        # Without a response schema a judge may answer in the prompt's own layout: one
        # "field: value" section per field, each exactly once.
        data = _labelled_fields(body)
        if data is None:
            raise MalformedOfficialVerdict(
                f"not the ExtractedAnswer fields: {text[:200]!r}"
            ) from None
    if not isinstance(data, dict) or not (HLE_FIELDS <= set(data) <= HLE_FIELDS | {"strict"}):
        raise MalformedOfficialVerdict(f"not the ExtractedAnswer fields: {text[:200]!r}")
    if data["correct"] not in ("yes", "no"):
        raise MalformedOfficialVerdict(f"correct must be 'yes' or 'no': {data['correct']!r}")
    confidence = data["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int):
        raise MalformedOfficialVerdict(f"confidence must be an integer: {confidence!r}")
    if not isinstance(data["extracted_final_answer"], str):
        raise MalformedOfficialVerdict("extracted_final_answer must be a string")
    return {
        "extracted_final_answer": data["extracted_final_answer"][:500],
        "correct": data["correct"] == "yes",
        "confidence": max(0, min(100, confidence)),
    }


_LABEL = re.compile(r"^(extracted_final_answer|reasoning|correct|confidence):[ \t]*", re.MULTILINE)


def _labelled_fields(body: str) -> dict[str, Any] | None:
    marks = list(_LABEL.finditer(body))
    names = [m.group(1) for m in marks]
    if sorted(names) != sorted(HLE_FIELDS) or (marks and body[: marks[0].start()].strip()):
        return None
    data: dict[str, Any] = {}
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(body)
        data[m.group(1)] = body[m.end() : end].strip()
    confidence = data["confidence"].rstrip("%").strip()
    if not re.fullmatch(r"-?\d+", confidence):
        return None
    data["confidence"] = int(confidence)
    return data


def official_detail(template: OfficialTemplate, reply: str) -> dict[str, Any]:
    """The cell's `grade["official"]` from the official judge's reply."""
    head = {"scorer": template.scorer, "template_sha256": template.sha256}
    try:
        if template.benchmark == "simpleqa":
            return {**head, "status": "graded", "verdict": parse_simpleqa_grade(reply)}
        return {**head, "status": "graded", **parse_hle_judgement(reply)}
    except MalformedOfficialVerdict as exc:
        return {**head, "status": "unparsed", "reason": str(exc)}


def not_graded(reason: str, status: Literal["failed", "not_run"] = "not_run") -> dict[str, Any]:
    return {"status": status, "reason": reason}


# ---------------------------------------------------------------------------------------------
# Summaries (pure)


def _wilson(k: int | Fraction, n: int) -> list[float] | None:
    """The shared Wilson interval (95 %) as a list, None for n = 0."""
    interval = wilson_interval(k, n)
    return None if interval is None else list(interval)


def _f_score(c: float, i: float, n: float) -> float | None:
    """Harmonic mean of correct (c/n) and correct-given-attempted (c/(c+i)); 0 when nothing
    is correct (the harmonic mean with a zero term), None when nothing was graded."""
    if n == 0:
        return None
    if c == 0:
        return 0.0
    overall = c / n
    given = c / (c + i)
    return 2 * overall * given / (overall + given)


def simpleqa_summary(verdicts: Sequence[str | None]) -> dict[str, Any]:
    """One official verdict per question (None: no official verdict). Rates are over the
    questions with a verdict, as simple-evals and inspect_evals divide by graded samples; the
    questions without one are counted beside them, never graded."""
    graded = [v for v in verdicts if v is not None]
    n = len(graded)
    c = sum(1 for v in graded if v == "correct")
    i = sum(1 for v in graded if v == "incorrect")
    na = sum(1 for v in graded if v == "not_attempted")
    out: dict[str, Any] = {
        "label": LABELS["simpleqa"],
        "questions": len(verdicts),
        "graded": n,
        "without_verdict": len(verdicts) - n,
        "counts": {"correct": c, "incorrect": i, "not_attempted": na},
    }
    if n == 0:
        return {**out, "value": None, "reason": "no question has an official verdict"}
    attempted = c + i
    given = None if attempted == 0 else c / attempted
    f = _f_score(c, i, n)
    out.update(
        value=f,
        correct=c / n,
        incorrect=i / n,
        not_attempted=na / n,
        correct_given_attempted=given,
        f_score=f,
        correct_wilson_95=_wilson(c, n),
        incorrect_wilson_95=_wilson(i, n),
        not_attempted_wilson_95=_wilson(na, n),
        correct_given_attempted_wilson_95=_wilson(c, attempted),
        f_score_interval=_f_score_bootstrap(c, i, na),
    )
    return out


def _f_score_bootstrap(c: int, i: int, na: int) -> dict[str, Any]:
    n = c + i + na
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = rng.multinomial(n, [c / n, i / n, na / n], size=BOOTSTRAP_DRAWS)
    cs, is_ = draws[:, 0].astype(float), draws[:, 1].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        overall = cs / n
        given = np.where(cs + is_ > 0, cs / (cs + is_), 0.0)
        f = np.where(cs > 0, 2 * overall * given / (overall + given), 0.0)
    lo, hi = np.quantile(f, [0.025, 0.975])
    method = (
        f"percentile bootstrap, {BOOTSTRAP_DRAWS} resamples of the {n} graded questions "
        f"(seed {BOOTSTRAP_SEED})"
    )
    if 0 in (c, i + na):
        # A grade never observed is never resampled: the bootstrap cannot widen past it.
        method += "; degenerate here (all or none correct), see the Wilson interval on correct"
    return {"method": method, "bounds": [float(lo), float(hi)]}


def rms_calibration_error(
    confidences: Sequence[int], correct: Sequence[bool], *, convention: str = "inspect_evals"
) -> float | None:
    """RMS calibration error: answers sorted by stated confidence (0..100, as a probability),
    cut into consecutive bins, √(Σ_bins |bin| / n · (mean confidence − accuracy)²).

    `inspect_evals` (`hle/metrics.py` `cerr`): bins of min(100, n), the last bin taking the
    remainder, every bin kept. `cais` (`hle_eval/run_judge_results.py` `calib_err(p='2',
    beta=100)`): bins of 100, the last taking the remainder, and the last bin *dropped* (its
    loop runs over all bins but one); CAIS returns None below 100 answers, and with fewer than
    200 no bin is left and it would print 0 — None here, because 0 would claim perfect
    calibration. The sort is stable (numpy's default is not: with tied confidences across a
    bin boundary the packages' bins may differ)."""
    n = len(confidences)
    if n != len(correct):
        raise ValueError("one confidence per answer")
    if n == 0:
        return None
    order = sorted(range(n), key=lambda k: confidences[k])
    conf = [max(0, min(100, int(confidences[k]))) / 100 for k in order]
    hit = [1.0 if correct[k] else 0.0 for k in order]
    if convention == "inspect_evals":
        size = min(HLE_CALIBRATION_BIN, n)
        keep_last = True
    elif convention == "cais":
        if n < 2 * HLE_CALIBRATION_BIN:
            return None
        size = HLE_CALIBRATION_BIN
        keep_last = False
    else:
        raise ValueError(f"unknown convention {convention!r}")
    starts = list(range(0, (n // size) * size, size))
    bins = [(s, s + size) for s in starts]
    bins[-1] = (bins[-1][0], n)
    if not keep_last:
        bins = bins[:-1]
    total = 0.0
    for lo, hi in bins:
        m = hi - lo
        gap = sum(conf[lo:hi]) / m - sum(hit[lo:hi]) / m
        total += m / n * gap * gap
    return math.sqrt(total)


def _rms_batch(conf: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """`rms_calibration_error` (inspect_evals convention) of each row, vectorised."""
    rows, n = conf.shape
    order = np.argsort(conf, axis=1, kind="stable")
    c = np.take_along_axis(conf, order, axis=1)
    h = np.take_along_axis(hit, order, axis=1)
    zero = np.zeros((rows, 1))
    cs = np.concatenate([zero, np.cumsum(c, axis=1)], axis=1)
    hs = np.concatenate([zero, np.cumsum(h, axis=1)], axis=1)
    size = min(HLE_CALIBRATION_BIN, n)
    edges = [k * size for k in range(n // size)] + [n]
    total = np.zeros(rows)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        m = hi - lo
        gap = ((cs[:, hi] - cs[:, lo]) - (hs[:, hi] - hs[:, lo])) / m
        total += m / n * gap * gap
    return np.sqrt(total)


def _calibration_bootstrap(confidences: Sequence[int], correct: Sequence[bool]) -> dict[str, Any]:
    n = len(confidences)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    conf = np.clip(np.asarray(confidences, dtype=float), 0, 100) / 100
    hit = np.asarray(correct, dtype=float)
    values = []
    chunk = 200
    for start in range(0, CALIBRATION_BOOTSTRAP_DRAWS, chunk):
        pick = rng.integers(0, n, size=(min(chunk, CALIBRATION_BOOTSTRAP_DRAWS - start), n))
        values.append(_rms_batch(conf[pick], hit[pick]))
    lo, hi = np.quantile(np.concatenate(values), [0.025, 0.975])
    return {
        "method": (
            f"percentile bootstrap, {CALIBRATION_BOOTSTRAP_DRAWS} resamples of the {n} judged answers, bins "
            f"recomputed per resample (seed {BOOTSTRAP_SEED})"
        ),
        "bounds": [float(lo), float(hi)],
    }


def hle_summary(judgements: Sequence[tuple[bool, int] | None]) -> dict[str, Any]:
    """One entry per question: (correct, stated confidence) from the official judge, or None
    (no official judgement). Accuracy follows CAIS: over every question, one without a
    judgement counting wrong. Calibration is over the judged answers only."""
    n = len(judgements)
    judged = [j for j in judgements if j is not None]
    c = sum(1 for ok, _ in judged if ok)
    out: dict[str, Any] = {
        "label": LABELS["hle"],
        "questions": n,
        "judged": len(judged),
        "without_judgement": n - len(judged),
        "correct": c,
    }
    if n == 0 or not judged:
        return {**out, "value": None, "reason": "no question has an official judgement"}
    acc = c / n
    confidences = [conf for _, conf in judged]
    hits = [ok for ok, _ in judged]
    cais = rms_calibration_error(confidences, hits, convention="cais")
    out.update(
        value=acc,
        accuracy=acc,
        accuracy_wilson_95=_wilson(c, n),
        # CAIS prints a Wald half-width (95 %) beside its accuracy; given for comparison.
        accuracy_wald_half_width=Z_95 * math.sqrt(acc * (1 - acc) / n),
        calibration_error=rms_calibration_error(confidences, hits),
        calibration_error_method=(
            "RMS over confidence-sorted bins of min(100, n), every bin kept (inspect_evals "
            "hle/cerr)"
        ),
        calibration_error_interval=_calibration_bootstrap(confidences, hits),
        calibration_error_cais=cais,
        calibration_error_cais_reason=(
            None
            if cais is not None
            else "CAIS bins by 100 and drops the top bin: needs at least 200 judged answers"
        ),
        mean_confidence=sum(confidences) / len(confidences) / 100,
    )
    return out


def arc_task_score(attempts: Sequence[Sequence[bool] | None], outputs: int) -> Fraction:
    """One task: `attempts` holds, per attempt, whether it matched each test output (None: the
    attempt gave no gradable answer, which matches nothing). An output counts if any attempt
    matched it; the task scores the mean over its outputs."""
    if outputs < 1:
        raise ValueError("a task has at least one test output")
    hit = [False] * outputs
    for attempt in attempts:
        if attempt is None:
            continue
        for k, ok in enumerate(list(attempt)[:outputs]):
            hit[k] = hit[k] or bool(ok)
    return Fraction(sum(hit), outputs)


def arc_summary(
    tasks: Sequence[tuple[int, Sequence[Sequence[bool] | None]]], slots: int
) -> dict[str, Any]:
    """`tasks`: per question, (number of test outputs, its first two attempts' per-output
    matches). ARC Prize allows two attempts; with one attempt per question it is not pass@2."""
    out: dict[str, Any] = {
        "label": LABELS["arc"],
        "tasks": len(tasks),
        "attempts_per_question": slots,
        "attempts_used": min(slots, 2),
    }
    if slots < 2:
        return {
            **out,
            "value": None,
            "reason": (
                "ARC Prize scores two attempts per test output; this plan makes one attempt per "
                "question (plan slots ≥ 2 to report it)"
            ),
        }
    if not tasks:
        return {**out, "value": None, "reason": "no ARC task in this run"}
    scores = [arc_task_score(list(attempts)[:2], outputs) for outputs, attempts in tasks]
    total = sum(scores, Fraction(0))
    value = total / len(scores)
    outputs_total = sum(o for o, _ in tasks)
    return {
        **out,
        "value": float(value),
        "exact": str(value),
        "test_outputs": outputs_total,
        "tasks_fully_solved": sum(1 for s in scores if s == 1),
        "wilson_95": _wilson(total, len(scores)),
        "interval_method": "Wilson on the mean task score, n = tasks (as the sr-bench intervals)",
    }
