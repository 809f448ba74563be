"""The MCQ grader `mcq-strict/1`, frozen: runs whose manifest names it are still graded by it.

Superseded by `datasets.grading.grade_mcq` (`mcq-final/2`, the reference rule). Kept verbatim so
a run frozen at this version grades its remaining cells the same way after an upgrade, and its
stored grades can be reproduced; `benchmark regrade` moves a run to the current version. Do not
change its behaviour: a fix belongs in a new version. It reads only the first non-empty line as
a leading answer, so `B\\nC` counts as B (issue 21) — the reason it was replaced.
"""

from __future__ import annotations

import re

# strip_reasoning is shared with the grid and code graders: changing it changes this version.
from datasets.grading import MCQGrade, strip_reasoning

MCQ_STRICT_V1_VERSION = "mcq-strict/1"

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


def grade_mcq_strict_v1(response_text: str, correct_letter: str, n_options: int) -> MCQGrade:
    """`mcq-strict/1`: one distinct letter stated as the answer, or it is wrong.

    Accepted statements: a leading line that is just the letter (or "C. text"), "answer is X",
    "Answer: X" (bold, brackets and `$` tolerated) and `\\boxed{X}`. Several distinct letters →
    ambiguous; none → unparsed; a letter beyond the options is rejected. Here `strict_format`
    means "every stated letter was upper case", not the reference's meaning.
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
