"""Graders that need no sandbox: strict MCQ letters, the LLM-judge protocol, ARC grid match.

Each grader carries a version string; adapters expose it as `grader_version` and comparisons
refuse to pair runs graded by different versions (DESIGN §6), so any behavioural change here
must bump the matching constant.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, cast

MCQ_GRADER_VERSION = "mcq-strict/1"
JUDGE_PROTOCOL_VERSION = "judge-json/1"
GRID_GRADER_VERSION = "grid-exact/1"

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
# Multiple choice

MCQStatus = Literal["ok", "ambiguous", "unparsed"]


@dataclass(frozen=True)
class MCQGrade:
    correct: bool
    extracted: str | None
    status: MCQStatus
    strict_format: bool


# One answer letter as written after an explicit cue: optional "option"/"choice", optional
# brackets or $...$. Upper case may be followed by prose ("The answer is C because ..."); lower
# case must stand alone, or "the answer is a function" would read as option A.
_LETTER = r"""
    (?:(?:option|choice)\s+)?
    \$?\(?\$?
    (?:
        (?P<up>[A-Z])(?![A-Za-z0-9'’])
      | (?P<low>[a-z])(?=\)|\s*[.,;:!]?\s*(?:$|\n))
    )
"""
# "I" as a pronoun after a cue ("the answer is I think B") is not option I.
_PRONOUN_I = re.compile(r"I\s+(?:think|believe|guess|would|am|feel|suppose|need|will|can)\b")
# A second letter joined by or/and/comma/slash makes the statement a list, hence ambiguous.
_MORE_LETTERS = re.compile(
    r"\s*\)?\$?\s*(?:,|/|&|\bor\b|\band\b)\s*(?:(?:option|choice)\s+)?\(?([A-Za-z])\)?(?![A-Za-z0-9])"
)
_EXPLICIT_CUES = [
    re.compile(r"\banswer\s+is\b\s*:?\s*", re.IGNORECASE),
    re.compile(r"\banswer\s*:\s*", re.IGNORECASE),
]
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_BOXED_INNER = re.compile(
    r"^\s*(?:\\text(?:bf)?\s*\{\s*)?\(?\s*([A-Za-z])\s*\)?\s*\}?\s*(?:[.):]\s*.*)?$", re.DOTALL
)
_LEADING_BARE = re.compile(r"^\s*\(?([A-Za-z])\)?\s*[.:)]?\s*$")
_LEADING_LABELLED = re.compile(r"^\s*(?:\(([A-Z])\)|([A-Z])[.)])\s+\S")
_LETTER_AFTER_CUE = re.compile(_LETTER, re.VERBOSE)


def _letters_after(text: str, start: int) -> list[str]:
    if _PRONOUN_I.match(text, start):
        return []
    first = _LETTER_AFTER_CUE.match(text, start)
    if first is None:
        return []
    letters = [first.group("up") or first.group("low")]
    pos = first.end()
    while True:
        more = _MORE_LETTERS.match(text, pos)
        if more is None:
            break
        letters.append(more.group(1))
        pos = more.end()
    return letters


def _candidates(text: str) -> list[str]:
    """Every letter the reply states as its answer, with original case."""
    found: list[str] = []
    for match in _BOXED.finditer(text):
        inner = _BOXED_INNER.match(match.group(1))
        if inner:
            found.append(inner.group(1))
    for cue in _EXPLICIT_CUES:
        for match in cue.finditer(text):
            found.extend(_letters_after(text, match.end()))
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    bare = _LEADING_BARE.match(first_line)
    if bare:
        found.append(bare.group(1))
    else:
        labelled = _LEADING_LABELLED.match(first_line)
        if labelled:
            found.append(labelled.group(1) or labelled.group(2))
    return found


def grade_mcq(response_text: str, correct_letter: str, n_options: int) -> MCQGrade:
    """Strict final-answer grading: one distinct letter stated as the answer, or it is wrong.

    Accepted statements: a leading line that is just the letter (or "C. text"), "answer is X",
    "Answer: X" (bold, brackets and `$` tolerated) and `\\boxed{X}`. Several distinct letters →
    ambiguous; none → unparsed; a letter beyond the options is rejected. Unlike the upstream
    MMLU-Pro script we never fall back to the last letter in the reasoning or a random guess:
    both reward a model for not answering.
    """
    valid = {chr(ord("A") + i) for i in range(n_options)}
    # Markdown emphasis is noise around the cue ("**Answer:** **C**").
    text = strip_reasoning(response_text).replace("**", "").replace("__", "")
    candidates = _candidates(text)
    distinct = {c.upper() for c in candidates}
    if not distinct:
        return MCQGrade(correct=False, extracted=None, status="unparsed", strict_format=False)
    if len(distinct) > 1:
        return MCQGrade(correct=False, extracted=None, status="ambiguous", strict_format=False)
    (letter,) = distinct
    if letter not in valid:
        return MCQGrade(correct=False, extracted=None, status="unparsed", strict_format=False)
    strict = all(c.isupper() for c in candidates)
    return MCQGrade(
        correct=letter == correct_letter.upper(),
        extracted=letter,
        status="ok",
        strict_format=strict,
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
        return GridGrade(False, "unparsed", None, 0, len(outputs))
    pairs_correct = sum(1 for got, want in zip(parsed, outputs, strict=False) if got == want)
    if len(parsed) != len(outputs):
        return GridGrade(False, "wrong_count", parsed, pairs_correct, len(outputs))
    return GridGrade(pairs_correct == len(outputs), "ok", parsed, pairs_correct, len(outputs))
