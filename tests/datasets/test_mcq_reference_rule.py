"""The MCQ grader `mcq-final/2` follows the reference rule (sr-bench.md, "MCQ grader") exactly.

Every row carries the clause of the rule that decides it, quoted from the reference text.
Key "B" of four options unless a row says otherwise.
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

import pytest

from datasets.grading import MCQ_GRADER_VERSION, MCQ_STATUSES, grade_mcq

# The rule, clause by clause, as the reference states it.
VISIBLE = "It reads only the visible final text and returns no answer if a <think> tag remains."
LINE = (
    "a leading answer line such as `A`, `(B)`, `ANSWER: C` or `**D**`, "
    "which counts standalone answer lines"
)
DECLARATION = (
    'explicit declarations: "the (correct|final) answer is X", "answer: X" and '
    '"final answer: X", including alternatives joined by "or/and/,/"'
)
BOXED = "\\boxed{X}"
ONE = "Exactly one distinct candidate => parsed."
MANY = "More than one => ambiguous."
NONE = 'None => unparsed. The grader never guesses a "last letter".'
STRICT = (
    "strict_format (the whole reply is just the letter) is reported separately from correctness."
)


class Row(NamedTuple):
    reply: str
    extracted: str | None
    status: str
    strict: bool
    because: str
    key: str = "B"
    options: int = 4


ROWS: list[Row] = [
    # --- leading and standalone answer lines: LINE, then ONE -------------------------------------
    Row("B", "B", "ok", True, f"{LINE}; {ONE}; {STRICT}"),
    Row("  B \n", "B", "ok", True, f"{STRICT}: whitespace around the letter is not a reply"),
    Row("(B)", "B", "ok", False, f"{LINE} `(B)`; not just the letter ({STRICT})"),
    Row("**B**", "B", "ok", False, f"{LINE} `**D**`"),
    Row("ANSWER: B", "B", "ok", False, f"{LINE} `ANSWER: C`"),
    Row("B.", "B", "ok", False, f"{LINE}: the letter ends the line"),
    Row("[B]", "B", "ok", False, f"{LINE}: bracketed like `(B)`"),
    Row("b", "B", "ok", False, f"{LINE}; the options are upper case, so not {STRICT}"),
    Row("B\n\nThe other options contradict the data.", "B", "ok", False, f"{LINE}; {ONE}"),
    Row("Comparing the options first.\n\nB", "B", "ok", False, f"{LINE}: any standalone line"),
    Row("C", "C", "ok", True, f"{ONE}; {STRICT}: strict yet wrong"),
    Row("## B", "B", "ok", False, f"{LINE}: markdown heading around the line"),
    Row("> B", "B", "ok", False, f"{LINE}: markdown quote around the line"),
    Row("- B", "B", "ok", False, f"{LINE}: markdown bullet around the line"),
    # --- several standalone lines: LINE collects every one, then MANY ----------------------------
    Row("B\nC", None, "ambiguous", False, f"{LINE}; {MANY}"),
    Row("B\nC\nD", None, "ambiguous", False, f"{LINE}; {MANY}"),
    Row("(B)\n(C)", None, "ambiguous", False, f"{LINE}; {MANY}"),
    Row("A\nB", None, "ambiguous", False, f"{LINE}; {MANY}", key="A"),
    Row("- B\n- C", None, "ambiguous", False, f"{LINE}; {MANY}"),
    Row("B\n\nOn reflection:\n\nC", None, "ambiguous", False, f"{LINE}; {MANY}"),
    Row("**B**\n`C`", None, "ambiguous", False, f"{LINE}; {MANY}"),
    Row("B\nB", "B", "ok", False, f"{LINE}; {ONE}: one distinct candidate, twice"),
    Row("A\n\nThe answer is (B)", None, "ambiguous", False, f"{LINE} + {DECLARATION}; {MANY}"),
    # --- declarations: DECLARATION, then ONE -----------------------------------------------------
    Row("The answer is B.", "B", "ok", False, f"{DECLARATION}; {ONE}"),
    Row("The correct answer is B", "B", "ok", False, f"{DECLARATION}; {ONE}"),
    Row("The final answer is (B).", "B", "ok", False, f"{DECLARATION}; {ONE}"),
    Row("Answer: B", "B", "ok", False, f"{DECLARATION} 'answer: X'"),
    Row("Final answer: B", "B", "ok", False, f"{DECLARATION} 'final answer: X'"),
    Row("answer: b", "B", "ok", False, f"{DECLARATION}; the letter in either case"),
    Row("The answer is: B", "B", "ok", False, f"{DECLARATION}"),
    Row("The correct answer is option B.", "B", "ok", False, f"{DECLARATION}"),
    Row("The answer is B because the derivative vanishes.", "B", "ok", False, DECLARATION),
    Row("Step 1... Step 2... So the answer is B", "B", "ok", False, f"{DECLARATION}"),
    Row("Answer:\nB", "B", "ok", False, f"{DECLARATION} and {LINE}; {ONE}"),
    Row("Answer: B\nAnswer: B", "B", "ok", False, f"{DECLARATION}; {ONE}"),
    Row(
        "The answer is a function of T; Answer: B", "B", "ok", False, f"{DECLARATION}: 'a' + prose"
    ),
    Row("The answer isn't A; it's B.", None, "unparsed", False, f"no declaration; {NONE}"),
    Row("My answer is B", None, "unparsed", False, f"not 'the (correct|final) answer is'; {NONE}"),
    Row("I think B fits, but C... So overall, C.", None, "unparsed", False, f"{NONE}"),
    Row(
        "The answer is I think B",
        None,
        "unparsed",
        False,
        f"'I think' is no letter; {NONE}",
        "B",
        10,
    ),
    # --- declarations with alternatives: DECLARATION, then MANY ----------------------------------
    Row("The answer is A or B.", None, "ambiguous", False, f"{DECLARATION}; {MANY}"),
    Row("Answer: B, C", None, "ambiguous", False, f"{DECLARATION}; {MANY}"),
    Row("Answer: B/C", None, "ambiguous", False, f"{DECLARATION}; {MANY}"),
    Row("The answer is (B) and (C).", None, "ambiguous", False, f"{DECLARATION}; {MANY}"),
    Row("Final answer: B, C, or D", None, "ambiguous", False, f"{DECLARATION}; {MANY}"),
    Row("answer: b or c", None, "ambiguous", False, f"{DECLARATION}; {MANY}"),
    Row("The answer is B, and A is wrong.", None, "ambiguous", False, f"{DECLARATION} 'and'"),
    Row("The answer is B. Wait, the answer is C.", None, "ambiguous", False, f"{MANY}"),
    Row("The answer is B and not C.", "B", "ok", False, f"{DECLARATION}: 'not' is no letter"),
    Row(
        "The answer is B, since C fails.", "B", "ok", False, f"{DECLARATION}: 'since' is no letter"
    ),
    # --- \boxed{}: BOXED --------------------------------------------------------------------------
    Row("\\boxed{B}", "B", "ok", False, f"{BOXED}; {ONE}"),
    Row("So we get $\\boxed{B}$.", "B", "ok", False, f"{BOXED}"),
    Row("\\boxed{\\text{B}}", "B", "ok", False, f"{BOXED}"),
    Row("\\boxed{(B)}", "B", "ok", False, f"{BOXED}"),
    Row("The answer is B. \\boxed{B}", "B", "ok", False, f"{DECLARATION} + {BOXED}; {ONE}"),
    Row("\\boxed{B}\n\\boxed{C}", None, "ambiguous", False, f"every {BOXED}; {MANY}"),
    Row("Answer: B\n\\boxed{C}", None, "ambiguous", False, f"{DECLARATION} + {BOXED}; {MANY}"),
    Row("\\boxed{42}", None, "unparsed", False, f"a box with no letter; {NONE}"),
    # --- think tags: VISIBLE ----------------------------------------------------------------------
    Row("<think>The answer is A</think>The answer is B", "B", "ok", False, VISIBLE),
    Row("<think>A\nC</think>\nB", "B", "ok", True, f"{VISIBLE}; {STRICT} of the visible text"),
    Row("<THINK>Answer: A</THINK>\nAnswer: B", "B", "ok", False, VISIBLE),
    Row("<think>Answer: B</think>", None, "unparsed", False, f"{VISIBLE}; {NONE}"),
    Row("<think>still thinking, the answer is B", None, "unparsed", False, VISIBLE),
    Row("Answer: A is tempting.</think>\nAnswer: B", None, "unparsed", False, VISIBLE),
    Row("<think>x</think>B<think>y", None, "unparsed", False, VISIBLE),
    # --- markdown and code spans: LINE's `**D**`, the same marks around any form -----------------
    Row("`B`", "B", "ok", False, f"{LINE}: a code span like `**D**`"),
    Row("_B_", "B", "ok", False, f"{LINE}: emphasis like `**D**`"),
    Row("**Answer:** B", "B", "ok", False, f"{DECLARATION}; marks are decoration"),
    Row("Answer: **B**", "B", "ok", False, f"{DECLARATION}; marks are decoration"),
    Row("**The answer is (B)**", "B", "ok", False, f"{DECLARATION}; marks are decoration"),
    Row("The answer is `B`.", "B", "ok", False, f"{DECLARATION}; marks are decoration"),
    Row("### Final answer\n\n**B**", "B", "ok", False, f"{LINE}; a heading without a letter"),
    Row("```\nB\n```", "B", "ok", False, f"{LINE}: a fenced line is still a line"),
    # --- restated options are not answer lines: LINE is a line that is only the answer ------------
    Row("A. 3\nB. 4\nC. 5\nD. 6\nThe answer is B.", "B", "ok", False, f"{LINE}; {DECLARATION}"),
    Row("A. 3\nThe answer is B.", "B", "ok", False, f"'A. 3' restates an option; {ONE}"),
    Row("(A) 3 is too small.\nAnswer: B", "B", "ok", False, f"{LINE}; {DECLARATION}"),
    Row("B. 4 newtons, since F = ma.", None, "unparsed", False, f"restated option; {NONE}"),
    Row("Option B looks best.", None, "unparsed", False, f"no line, declaration or box; {NONE}"),
    # --- letters beyond the options, and nothing at all --------------------------------------------
    Row("Answer: E", None, "unparsed", False, f"{DECLARATION} names no option; {NONE}"),
    Row("Answer: E\n\\boxed{B}", None, "ambiguous", False, f"two candidates; {MANY}"),
    Row("\\boxed{E}", None, "unparsed", False, f"{BOXED} names no option"),
    Row("Answer: J", "J", "ok", False, f"{DECLARATION}; J of ten options", key="J", options=10),
    Row("", None, "unparsed", False, NONE),
    Row("The answer is either of them.", None, "unparsed", False, NONE),
]


@pytest.mark.parametrize("row", ROWS, ids=[repr(r.reply)[:48] for r in ROWS])
def test_reply_gets_the_verdict_the_reference_rule_gives(row: Row) -> None:
    grade = grade_mcq(row.reply, row.key, row.options)
    assert (grade.extracted, grade.status, grade.strict_format) == (
        row.extracted,
        row.status,
        row.strict,
    ), row.because
    assert grade.correct == (row.status == "ok" and row.extracted == row.key)


def test_table_has_at_least_sixty_distinct_replies() -> None:
    assert len({r.reply for r in ROWS}) == len(ROWS) >= 60


def test_the_grader_is_a_new_version() -> None:
    assert MCQ_GRADER_VERSION == "mcq-final/2"


# --- fuzz ----------------------------------------------------------------------------------------

LETTERS = "ABCDEFGHIJ"
FRAGMENTS = [
    *LETTERS,
    *"abcdefghijKLMZz",
    " ",
    "  \t ",
    "\n",
    "\n\n",
    "\r\n",
    "The answer is ",
    "the correct answer is",
    "The final answer is: ",
    "Answer:",
    "answer: ",
    "Final answer: ",
    "ANSWER:",
    "answer isn't ",
    "My answer is ",
    " or ",
    " and ",
    ", ",
    ", or ",
    "/",
    " & ",
    "option ",
    "choice ",
    "I think ",
    "I am ",
    "**",
    "*",
    "_",
    "__",
    "`",
    "```",
    "(",
    ")",
    "[",
    "]",
    "$",
    ".",
    ":",
    ";",
    "!",
    "'",
    "’",
    "\\boxed{",
    "\\boxed {",
    "}",
    "{",
    "\\text{",
    "\\textbf{",
    "<think>",
    "</think>",
    "<THINK >",
    "</think >",
    "<think",
    "# ",
    "### ",
    "> ",
    "- ",
    "+ ",
    "1. ",
    "42",
    "3.14",
    "because the derivative vanishes",
    "é",
    "Ⅰ",
    "\u200b",
    "\x00",
    "\ud83d\ude00",
    "\\",
    "\\\\",
    "A. 3",
    "(B) 4",
]


STATEMENTS = [
    "{}",
    "({})",
    "**{}**",
    "`{}`",
    "ANSWER: {}",
    "The answer is {}.",
    "the correct answer is ({})",
    "Final answer: {}",
    "\\boxed{{{}}}",
    "$\\boxed{{\\text{{{}}}}}$",
    "The answer is {} or {}",
]


def random_noise(rng: random.Random, most: int) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, most)))


def random_reply(rng: random.Random) -> str:
    """Noise from FRAGMENTS, or one to three answer statements (often agreeing) in noise."""
    if rng.random() < 0.01:
        # Long and repetitive: a pathological regex would take seconds here.
        piece = rng.choice(FRAGMENTS) + rng.choice(FRAGMENTS)
        return rng.choice(LETTERS) + piece * rng.randint(500, 3000) + rng.choice(LETTERS)
    if rng.random() < 0.4:
        return random_noise(rng, 40)
    letters = rng.choice(["B", "BB", "BC", "AE"])
    parts = []
    for _ in range(rng.randint(1, 3)):
        template = rng.choice(STATEMENTS)
        parts.append(template.format(*(rng.choice(letters) for _ in range(template.count("{}")))))
        parts.append(random_noise(rng, 6))
    return rng.choice(["\n", "\n\n", " "]).join(parts)


def test_ten_thousand_generated_replies_never_raise_and_keep_the_rule() -> None:
    rng = random.Random(20260921)
    statuses = dict.fromkeys(MCQ_STATUSES, 0)
    for _ in range(10_000):
        reply = random_reply(rng)
        options = rng.randint(2, 10)
        key = LETTERS[rng.randrange(options)]
        grade = grade_mcq(reply, key, options)
        statuses[grade.status] += 1
        assert grade.status in MCQ_STATUSES, reply
        assert (grade.extracted is not None) == (grade.status == "ok"), reply
        if grade.extracted is not None:
            assert grade.extracted in LETTERS[:options], reply
        assert grade.correct == (grade.status == "ok" and grade.extracted == key), reply
        if grade.strict_format:  # the visible reply is just the letter read
            visible = re.sub(r"(?is)<think\s*>.*?</think\s*>", "", reply)
            assert grade.status == "ok" and visible.strip() == grade.extracted, reply
        if grade.status == "ok" and grade.extracted is not None:
            # Another standalone answer line always makes the reply ambiguous; the same letter
            # again changes nothing (the candidates are a set).
            other = LETTERS[(LETTERS.index(grade.extracted) + 1) % options]
            assert grade_mcq(f"{reply}\n{other}", key, options).status == "ambiguous", reply
            again = grade_mcq(f"{reply}\n{grade.extracted}", key, options)
            assert (again.status, again.extracted) == ("ok", grade.extracted), reply
    # The generator reaches every verdict, so the checks above were exercised.
    assert all(count > 100 for count in statuses.values()), statuses
