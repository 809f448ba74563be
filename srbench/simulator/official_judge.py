"""The simulated judge's answers to the official judge templates (issue 22 point 5).

`datasets.official` fills the SimpleQA grader template and CAIS's HLE judge prompt, read from
the installed inspect-evals; the simulated judge recognises them by their fixed wording, reads
the filled-in fields back and answers in the template's format, deterministically.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

# The official judge templates (datasets.official, read from the installed inspect-evals): the
# simulated judge recognises them by their fixed wording and reads the filled-in fields back.
_SIMPLEQA_MARK = 'Just return the letters "A", "B", or "C"'
_HLE_MARK = "extracted_final_answer: The final exact answer extracted from the [response]"
_CONFIDENCE_RE = re.compile(r"confidence:\s*(\d+)", re.IGNORECASE)
_FINAL_RE = re.compile(r"^(?:exact answer|answer):\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def _between(text: str, start: str, end: str, *, last: bool = False) -> str | None:
    i = text.rfind(start) if last else text.find(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    return None if j < 0 else text[i + len(start) : j]


def official_judge_reply(text: str, judge_verdict: Callable[[str, str], str]) -> str | None:
    """The simulated judge's answer to an official template, or None if `text` is not one.
    SimpleQA: the letter A/B/C; HLE: CAIS's ExtractedAnswer JSON with the confidence the
    response states (100 when it states none, as the template says). `judge_verdict` is the
    sr-bench judge's own rule (oracle.judge_verdict), so both judges agree."""
    if _SIMPLEQA_MARK in text:
        reference = _between(text, "\nGold target: ", "\nPredicted answer: ", last=True)
        response = _between(text, "\nPredicted answer: ", "\n```\n", last=True)
        if reference is None or response is None:
            return None
        verdict = judge_verdict(reference, response)
        return {"correct": "A", "incorrect": "B", "not_attempted": "C"}[verdict]
    if _HLE_MARK in text:
        response = _between(text, "\n\n[response]: ", "\n\nYour judgement must be")
        reference = _between(text, "\n\n[correct_answer]: ", "\n\nreasoning: ")
        if reference is None or response is None:
            return None
        verdict = judge_verdict(reference, response)
        stated = _CONFIDENCE_RE.findall(response)
        finals = _FINAL_RE.findall(response)
        extracted = finals[-1].strip() if finals else response.strip()
        return json.dumps(
            {
                "extracted_final_answer": "None" if verdict == "not_attempted" else extracted,
                "reasoning": f"The extracted answer is {verdict} against the reference.",
                "correct": "yes" if verdict == "correct" else "no",
                "confidence": int(stated[-1]) if stated else 100,
            }
        )
    return None
