"""Graders that need no sandbox: strict MCQ letters, the LLM-judge protocol, ARC grid match.

Each grader carries a version string; adapters expose it as `grader_version` and comparisons
refuse to pair runs graded by different versions (DESIGN §6), so any behavioural change here
must bump the matching constant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, cast

MCQ_GRADER_VERSION = "mcq-final/2"
JUDGE_PROTOCOL_VERSION = "judge-json/1"
GRID_GRADER_VERSION = "grid-exact/1"
ARC_PRIZE_SCORER_VERSION = "arc-prize-pass@2/1"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """Remove `<think>` reasoning so a letter weighed there is never taken as the answer.

    Some servers drop the opening tag (the template injects it), leaving only `</think>`; then
    everything before the last close tag is reasoning. An unclosed `<think>` means the answer
    never came, so everything after it goes.
    """
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text


# ---------------------------------------------------------------------------------------------
# Multiple choice: `mcq-final/2`, the reference rule (sr-bench `sr-bench-mcq-final-v2`)
#
# Candidates come from three places, and all of them are collected:
#   1. every standalone answer line: a line that is only a letter, as `A`, `(B)`, `ANSWER: C`,
#      `**D**` or `` `B` `` (a leading answer line is the first of them);
#   2. every explicit declaration: "the (correct|final) answer is X", "answer: X",
#      "final answer: X", with the alternatives joined to X by or / and / "," / "/";
#   3. every `\boxed{X}`.
# One distinct candidate → parsed; several → ambiguous; none → unparsed. No "last letter" guess.
# The previous version, `mcq-strict/1`, is frozen in datasets/mcq_grader_v1.py.

MCQStatus = Literal["ok", "ambiguous", "unparsed"]
MCQ_STATUSES: tuple[MCQStatus, ...] = ("ok", "ambiguous", "unparsed")


@dataclass(frozen=True)
class MCQGrade:
    """`extracted` is the one option letter read (None unless status is "ok"). `strict_format`
    (reference meaning, reported apart from correctness): the visible reply is exactly that
    letter, nothing around it but whitespace."""

    correct: bool
    extracted: str | None
    status: MCQStatus
    strict_format: bool


_THINK_TAG = re.compile(r"</?think\s*>", re.IGNORECASE)
# Emphasis and code spans decorate an answer without changing it (`**D**`, `` `B` ``, `_C_`).
_MARKDOWN_MARKS = re.compile(r"[*_`]")
# A letter given as an answer. Upper case may be followed by prose ("The answer is C because");
# lower case must end the statement or lead into an alternative, or "the answer is a function"
# would read as option A.
_ANSWER_LETTER = re.compile(
    r"""
    (?:(?:option|choice)\s+)?
    (?:\$\s*)?(?:[(\[]\s*)?(?:\$\s*)?
    (?:
        (?P<up>[A-Z])(?![A-Za-z0-9'’])
      | (?P<low>[a-z])(?=[)\]$]|[.,;:!]?[ \t]*(?:\n|\Z)|\s*(?:,|/|&|or\b|and\b))
    )
    """,
    re.VERBOSE,
)
# "I" as a pronoun ("the answer is I think B") is not option I.
_PRONOUN_I = re.compile(r"I\s+(?:think|believe|guess|would|am|feel|suppose|need|will|can)\b")
# What joins an alternative to the letter before it: "B or C", "B, C", "B/C", "(B) and (C)".
_ALTERNATIVE_JOIN = re.compile(
    r"(?:\s*[)\]])?(?:\s*\$)?\s*(?:,\s*(?:or|and)\b|,|/|&|\bor\b|\band\b)\s*", re.IGNORECASE
)
_DECLARATION = re.compile(
    r"\b(?:the\s+(?:(?:correct|final)\s+)?answer\s+is\b(?:\s*:)?|answer\s*:)\s*", re.IGNORECASE
)
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_BOXED_LETTER = re.compile(
    r"\s*(?:\\(?:text|textbf|mathrm|mathbf)\s*\{\s*)?\(?\s*([A-Za-z])\s*\)?\s*\}?\s*(?:[.):].*)?",
    re.DOTALL,
)
# Matched against one line with whitespace runs collapsed to one space and trimmed.
_ANSWER_LINE = re.compile(
    r"""
    (?:>\ ?)*(?:\#{1,6}\ |[-+]\ )?          # block quote, heading, bullet (`*` is already gone)
    (?:(?:final\ |correct\ )?answer\ ?:\ ?)?  # an "Answer:" label
    \$?[(\[]?\ ?([A-Za-z])\ ?[)\]]?\$?[.:)]?
    """,
    re.VERBOSE | re.IGNORECASE,
)
_SPACES = re.compile(r"\s+")


def mcq_visible_text(response_text: str) -> str | None:
    """The reply without its closed `<think>…</think>` blocks, or None when a think tag remains
    (an unclosed block, or a close tag with no opening): the reference then reads no answer.

    A linear walk over the tags, the same as removing `<think>.*?</think>` left to right."""
    kept: list[str] = []
    pos = 0
    open_at: int | None = None
    for tag in _THINK_TAG.finditer(response_text):
        closing = tag.group().startswith("</")
        if open_at is None:
            if closing:
                return None
            kept.append(response_text[pos : tag.start()])
            open_at = tag.start()
        elif closing:
            pos, open_at = tag.end(), None
    if open_at is not None:
        return None
    kept.append(response_text[pos:])
    return "".join(kept)


def _letter_at(text: str, pos: int) -> re.Match[str] | None:
    match = _ANSWER_LETTER.match(text, pos)
    if match is None or (match.group("up") == "I" and _PRONOUN_I.match(text, match.start("up"))):
        return None
    return match


def _declared_letters(text: str, start: int) -> list[str]:
    """The letter a declaration gives at `start`, and every alternative joined to it."""
    letters: list[str] = []
    match = _letter_at(text, start)
    while match is not None:
        letters.append(match.group("up") or match.group("low"))
        join = _ALTERNATIVE_JOIN.match(text, match.end())
        match = _letter_at(text, join.end()) if join else None
    return letters


def mcq_candidates(text: str) -> list[str]:
    """Every letter the visible reply gives as its answer (upper case, with repeats), from its
    standalone answer lines, its declarations and its `\\boxed{}`."""
    text = _MARKDOWN_MARKS.sub("", text)
    found: list[str] = []
    for line in text.splitlines():
        standalone = _ANSWER_LINE.fullmatch(_SPACES.sub(" ", line).strip())
        if standalone:
            found.append(standalone.group(1))
    for cue in _DECLARATION.finditer(text):
        found.extend(_declared_letters(text, cue.end()))
    for boxed in _BOXED.finditer(text):
        inner = _BOXED_LETTER.fullmatch(boxed.group(1))
        if inner:
            found.append(inner.group(1))
    return [letter.upper() for letter in found]


def grade_mcq(response_text: str, correct_letter: str, n_options: int) -> MCQGrade:
    """`mcq-final/2`: exactly one distinct candidate letter, which must name an option.

    A single candidate beyond the options (`Answer: E` of four) names no option: unparsed. It
    still counts as a candidate, so `Answer: E` beside `\\boxed{B}` is ambiguous.
    """
    visible = mcq_visible_text(response_text)
    distinct = set(mcq_candidates(visible)) if visible is not None else set()
    if len(distinct) > 1:
        return MCQGrade(correct=False, extracted=None, status="ambiguous", strict_format=False)
    letter = distinct.pop() if distinct else None
    if letter is None or letter not in {chr(ord("A") + i) for i in range(n_options)}:
        return MCQGrade(correct=False, extracted=None, status="unparsed", strict_format=False)
    return MCQGrade(
        correct=letter == correct_letter.strip().upper(),
        extracted=letter,
        status="ok",
        strict_format=visible is not None and visible.strip() == letter,
    )


# ---------------------------------------------------------------------------------------------
# Judge protocol (SimpleQA, HLE)

Verdict = Literal["correct", "incorrect", "not_attempted"]
VERDICTS: tuple[Verdict, ...] = ("correct", "incorrect", "not_attempted")


class MalformedVerdict(ValueError):
    """The judge's reply is not exactly a verdict object; the cell fails rather than guess."""


_JUDGE_SYSTEM = (
    "You grade answers to factual questions against a reference answer. You are strict about "
    "facts and lenient about form.\n"
    "- correct: the response's final answer states the reference answer (or an equivalent: "
    "another spelling, unit or wording that means the same), without contradicting it. Extra "
    "detail is fine if it does not contradict the reference. A number must match to the "
    "precision the reference gives.\n"
    "- incorrect: the final answer contradicts the reference, names something else, or lists "
    "several candidates of which any is wrong.\n"
    "- not_attempted: the response gives no final answer (declines, says it does not know, or "
    "only restates the question), and says nothing that contradicts the reference.\n"
    'Reply with exactly one JSON object and nothing else: {"verdict": "correct"} or '
    '{"verdict": "incorrect"} or {"verdict": "not_attempted"}.'
)

_JUDGE_BLOCK = re.compile(r"```json\n(?P<body>.*)\n```\Z", re.DOTALL)


def judge_messages(question_text: str, reference: str, response: str) -> list[dict[str, str]]:
    """Messages for the judge target. The last user message ends with one fenced JSON block
    holding exactly question/reference/response; the simulated judge parses that block, so its
    format is part of `JUDGE_PROTOCOL_VERSION`."""
    block = json.dumps(
        {"question": question_text, "reference": reference, "response": response},
        ensure_ascii=False,
    )
    user = (
        "Grade the response below. The question, the reference answer and the response to "
        "grade are in the JSON block.\n\n"
        f"```json\n{block}\n```"
    )
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_judge_block(user_message: str) -> dict[str, str]:
    """Inverse of `judge_messages`'s block: the question, reference and response it carries."""
    match = _JUDGE_BLOCK.search(user_message)
    if match is None:
        raise ValueError("no trailing ```json block in the judge message")
    data = json.loads(match.group("body"))
    if not isinstance(data, dict) or set(data) != {"question", "reference", "response"}:
        raise ValueError("the judge block must hold exactly question, reference and response")
    if not all(isinstance(v, str) for v in data.values()):
        raise ValueError("judge block values must be strings")
    return data


_VERDICT_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)


def parse_verdict(text: str) -> Verdict:
    """Accept only `{"verdict": "<one of VERDICTS>"}`, bare or in one ```json fence, with
    surrounding whitespace. Anything else (prose, extra keys, other casing) is malformed:
    guessing a verdict from prose would let a confused judge decide scores silently."""
    body = text.strip()
    fenced = _VERDICT_FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedVerdict(f"judge reply is not a JSON object: {text[:200]!r}") from exc
    if not isinstance(data, dict) or set(data) != {"verdict"}:
        raise MalformedVerdict(f"judge reply must be exactly {{'verdict': ...}}: {text[:200]!r}")
    verdict = data["verdict"]
    if verdict not in VERDICTS:
        raise MalformedVerdict(f"unknown verdict {verdict!r}")
    return cast(Verdict, verdict)


# ---------------------------------------------------------------------------------------------
# ARC grids

Grid = list[list[int]]
GridStatus = Literal["ok", "unparsed", "wrong_count"]


@dataclass(frozen=True)
class GridGrade:
    correct: bool
    status: GridStatus
    parsed: list[Grid] | None
    pairs_correct: int
    pairs_total: int
    # Per test output, in order: whether the grid at that position matched it exactly (what ARC
    # Prize's per-output pass@2 combines over attempts, datasets.official).
    outputs_correct: tuple[bool, ...] = ()


def _is_grid(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(row, list) and len(row) > 0 for row in value)
        and all(
            isinstance(cell, int) and not isinstance(cell, bool) for row in value for cell in row
        )
        and len({len(row) for row in value}) == 1
    )


def _top_level_arrays(text: str) -> list[Any]:
    """Every JSON array in the text that is not inside an earlier one, in order. Fenced and bare
    arrays are found alike because the fence markers are not JSON."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    pos = text.find("[")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            pos = text.find("[", pos + 1)
            continue
        found.append(value)
        pos = text.find("[", end)
    return found


def parse_grids(response_text: str, n_outputs: int) -> list[Grid] | None:
    """The last JSON array that is a list of grids. A single bare grid is accepted when exactly
    one output is expected: `[[1,2],[3,4]]` cannot mean two 1-row grids of a 1-output task."""
    for value in reversed(_top_level_arrays(strip_reasoning(response_text))):
        if isinstance(value, list) and value and all(_is_grid(g) for g in value):
            return value
        if n_outputs == 1 and _is_grid(value):
            return [value]
    return None


def grade_grid(response_text: str, outputs: list[Grid]) -> GridGrade:
    """Exact match of every output grid (dimensions and cells); correct only if all match."""
    parsed = parse_grids(response_text, len(outputs))
    if parsed is None:
        return GridGrade(False, "unparsed", None, 0, len(outputs), (False,) * len(outputs))
    matched = tuple(k < len(parsed) and parsed[k] == want for k, want in enumerate(outputs))
    pairs_correct = sum(matched)
    if len(parsed) != len(outputs):
        return GridGrade(False, "wrong_count", parsed, pairs_correct, len(outputs), matched)
    return GridGrade(
        pairs_correct == len(outputs), "ok", parsed, pairs_correct, len(outputs), matched
    )


# ---------------------------------------------------------------------------------------------
# ARC Prize official scoring (issue 22 point 5), a second scoring beside `grade_grid`.
#
# sr-bench 1.0 scores ARC with one attempt and all test outputs atomic (`grade_grid`, the
# composite's default, SPEC R4.1). ARC Prize scores each *test output* separately with up to two
# attempts: an output counts 1 if either attempt matches it exactly (dimensions and every cell),
# and a task's score is the mean over its test outputs, so a task with two test inputs can score
# 1/2. A benchmark score is the mean of the task scores. The two differ whenever a task has more
# than one test output or a second attempt is made, so they are reported side by side, labelled.

ARC_PRIZE_LABEL = "ARC Prize pass@2 (official scoring)"
ARC_PRIZE_MAX_ATTEMPTS = 2


@dataclass(frozen=True)
class ArcPrizeScore:
    """One task under ARC Prize scoring: `outputs_correct[i]` says whether either attempt at
    test output i matched; `score` is their mean, exact."""

    score: Fraction
    outputs_correct: tuple[bool, ...]
    version: str = ARC_PRIZE_SCORER_VERSION
    label: str = ARC_PRIZE_LABEL


def arc_prize_attempts(submission: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """A task's entry in ARC Prize's submission format — one `{"attempt_1": grid,
    "attempt_2": grid}` object per test input, in order — as attempt lists for
    `score_arc_prize_task`. A missing or null attempt stays None (it matches nothing)."""
    return [[entry.get("attempt_1"), entry.get("attempt_2")] for entry in submission]


def score_arc_prize_task(
    attempts: Sequence[Sequence[Any]], outputs: Sequence[Grid]
) -> ArcPrizeScore:
    """ARC Prize pass@2 for one task. `attempts[i]` holds at most two candidate grids for test
    output i (None or anything that is not a grid never matches). A test output with no attempts
    listed scores 0; more attempts than allowed, or attempts for outputs the task does not have,
    raise ValueError rather than being scored."""
    if not outputs:
        raise ValueError("a task has at least one test output")
    if len(attempts) > len(outputs):
        raise ValueError(
            f"attempts for {len(attempts)} test outputs, but the task has {len(outputs)}"
        )
    correct = []
    for index, want in enumerate(outputs):
        tries = list(attempts[index]) if index < len(attempts) else []
        if len(tries) > ARC_PRIZE_MAX_ATTEMPTS:
            raise ValueError(
                f"test output {index}: {len(tries)} attempts; ARC Prize allows "
                f"{ARC_PRIZE_MAX_ATTEMPTS}"
            )
        # _is_grid first: True == 1 in Python, and a grid of booleans is not a grid of colours.
        correct.append(any(_is_grid(got) and got == want for got in tries))
    return ArcPrizeScore(Fraction(sum(correct), len(outputs)), tuple(correct))


def score_arc_prize(task_scores: Sequence[ArcPrizeScore]) -> Fraction | None:
    """The benchmark score: the mean of the task scores; None (unknown) for no task (R1.2)."""
    if not task_scores:
        return None
    return sum((t.score for t in task_scores), Fraction(0)) / len(task_scores)
