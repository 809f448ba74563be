"""The oracle: decides whether a simulated model answers a known question correctly and writes a
well-formed answer; also the simulated judge and the simulated user.

A question is recognised by sha256 of the **last user message's content string** (text parts
joined by newlines) looked up in an ``AnswerKey``. Correctness is a seeded hash of
(seed, model, question) compared with the model's accuracy, so a model answers a given question
the same way whether it is called directly, streamed or not, or routed to by a MoM router.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from srbench.canonical import canonical_json
from srbench.simulator.tokens import content_text

Kind = Literal["mcq", "judge", "grid", "code", "agent"]
Verdict = Literal["correct", "incorrect", "not_attempted"]

USER_STOP = "###STOP###"


def stable_unit(*parts: Any) -> float:
    """A number in [0, 1) fixed by ``parts``: the simulator's only source of 'randomness'."""
    digest = hashlib.sha256(canonical_json(list(parts))).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def stable_index(n: int, *parts: Any) -> int:
    return int(stable_unit(*parts) * n)


def prompt_text_of(messages: list[dict[str, Any]]) -> str | None:
    """The content string of the last user message, which identifies a question."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return None


def prompt_sha256(prompt_text: str) -> str:
    return hashlib.sha256(prompt_text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class KeyEntry:
    benchmark: str
    kind: str
    secret: dict[str, Any]
    # Public payload, used for the number of options of an MCQ.
    payload: dict[str, Any] = field(default_factory=dict)


class AnswerKey:
    def __init__(self) -> None:
        self._entries: dict[str, KeyEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(
        self,
        prompt_text: str,
        benchmark: str,
        kind: str,
        secret: dict[str, Any],
        payload: dict[str, Any] | None = None,
    ) -> str:
        sha = prompt_sha256(prompt_text)
        self._entries[sha] = KeyEntry(benchmark, kind, dict(secret), dict(payload or {}))
        return sha

    def lookup(self, prompt_text: str | None) -> KeyEntry | None:
        if prompt_text is None:
            return None
        return self._entries.get(prompt_sha256(prompt_text))

    @classmethod
    def from_sources(cls, sources: Iterable[tuple[str, str]]) -> AnswerKey:
        """Build the key from official-format dataset files through the benchmark adapters.
        Imported here so the simulator runs (with an empty key) where they are absent."""
        from datasets.benchmarks import get_adapter

        key = cls()
        for benchmark_key, path in sources:
            adapter = get_adapter(benchmark_key)
            for question in adapter.load(Path(path)):
                text = prompt_text_of(adapter.messages(question.payload))
                if text is not None:
                    key.add(
                        text, question.benchmark, adapter.kind, question.secret, question.payload
                    )
        return key


# -- subject answers ---------------------------------------------------------------------------

LETTERS = string.ascii_uppercase

WRONG_FACTS = (
    "Lisbon",
    "Marie Curie",
    "the blue whale",
    "Jupiter",
    "Ada Lovelace",
    "the Treaty of Utrecht",
    "Kilimanjaro",
    "nitrogen",
)


def is_correct(seed: int, model: str, prompt_sha: str, accuracy: float) -> bool:
    return stable_unit("correct", seed, model, prompt_sha) < accuracy


def _option_count(entry: KeyEntry) -> int:
    options = entry.payload.get("options")
    if isinstance(options, (list, dict)) and options:
        return len(options)
    return 4


def mcq_answer(entry: KeyEntry, correct: bool, salt: str) -> str:
    right = str(entry.secret["answer"]).strip().upper()
    letter = right
    if not correct:
        count = max(_option_count(entry), LETTERS.index(right) + 1 if right in LETTERS else 2)
        others = [x for x in LETTERS[:count] if x != right]
        letter = others[stable_index(len(others), "mcq-wrong", salt)]
    # The body names no other letter so a strict grader sees exactly one.
    return (
        "I compared each option with what the question asks and kept the one that fits.\n\n"
        f"Answer: {letter}"
    )


def wrong_reference(reference: str, salt: str) -> str:
    """A deterministic answer that a fair judge grades incorrect against ``reference``."""
    number = reference.strip().replace(",", "")
    if re.fullmatch(r"-?\d+", number):
        return str(int(number) + 1 + stable_index(9, "num", salt))
    ref = normalise_answer(reference)
    choices = [w for w in WRONG_FACTS if ref not in normalise_answer(w)]
    return choices[stable_index(len(choices), "fact", salt)]


def judge_answer(entry: KeyEntry, correct: bool, salt: str) -> str:
    reference = str(entry.secret["answer"])
    answer = reference if correct else wrong_reference(reference, salt)
    return f"The answer is {answer}."


def grid_answer(entry: KeyEntry, correct: bool, salt: str) -> str:
    outputs = json.loads(json.dumps(entry.secret.get("outputs") or []))
    if not correct:
        cells = [
            (g, r, c)
            for g, grid in enumerate(outputs)
            for r, row in enumerate(grid)
            for c in range(len(row))
        ]
        if cells:
            g, r, c = cells[stable_index(len(cells), "grid", salt)]
            outputs[g][r][c] = (int(outputs[g][r][c]) + 1) % 10
        else:
            outputs = [[[0]]]
    return json.dumps(outputs, separators=(",", ":"))


def code_answer(entry: KeyEntry, correct: bool) -> str | None:
    """A reference solution when the key has one; otherwise, for LiveCodeBench rows (whose
    secret holds only tests), a program that answers from the hidden tests it was built from —
    the simulator is an oracle, so it may; it passes the real sandboxed grader exactly when
    ``correct``. The wrong variant runs cleanly but prints or returns a wrong value."""
    solution = entry.secret.get("solution")
    tests = entry.secret.get("tests")
    if isinstance(solution, str):
        body = solution if correct else "raise NotImplementedError('simulated wrong answer')\n"
    elif isinstance(tests, list) and tests and all(isinstance(t, dict) for t in tests):
        func_name = entry.payload.get("func_name")
        if all(t.get("testtype") == "stdin" for t in tests):
            answers = {t["input"]: t["output"] if correct else "0\n-1\n" for t in tests}
            body = (
                "import sys\n"
                f"ANSWERS = {answers!r}\n"
                "sys.stdout.write(ANSWERS.get(sys.stdin.read(), ''))\n"
            )
        elif isinstance(func_name, str) and func_name.isidentifier():
            # Keyed by the arguments re-encoded canonically, as the grader decodes each
            # input line with json.loads before the call.
            answers = {
                json.dumps([json.loads(line) for line in t["input"].split("\n")], sort_keys=True): (
                    json.loads(t["output"]) if correct else {"simulated": "wrong"}
                )
                for t in tests
            }
            body = (
                "import json\n"
                f"ANSWERS = json.loads({json.dumps(answers)!r})\n\n"
                "class Solution:\n"
                f"    def {func_name}(self, *args):\n"
                "        return ANSWERS.get(json.dumps(list(args), sort_keys=True))\n"
            )
        else:
            return None
    else:
        return None
    return f"Here is my solution.\n\n```python\n{body.rstrip()}\n```"


def generic_reply(model: str, prompt_text: str | None) -> str:
    words = len((prompt_text or "").split())
    return (
        f"This is a simulated reply from {model}. "
        f"Your message had {words} words; I have nothing more specific to say about it."
    )


@dataclass(frozen=True)
class Answer:
    content: str
    benchmark: str | None
    correct: bool | None


def subject_answer(
    key: AnswerKey, *, model: str, seed: int, prompt_text: str | None, accuracy_for: Any
) -> Answer:
    """``accuracy_for(benchmark) -> float`` is the model's accuracy on that benchmark."""
    entry = key.lookup(prompt_text)
    if entry is None or prompt_text is None:
        return Answer(generic_reply(model, prompt_text), None, None)
    sha = prompt_sha256(prompt_text)
    correct = is_correct(seed, model, sha, float(accuracy_for(entry.benchmark)))
    salt = f"{seed}:{model}:{sha}"
    content: str | None
    if entry.kind == "mcq":
        content = mcq_answer(entry, correct, salt)
    elif entry.kind == "judge":
        content = judge_answer(entry, correct, salt)
    elif entry.kind == "grid":
        content = grid_answer(entry, correct, salt)
    else:
        content = code_answer(entry, correct)
    if content is None:
        return Answer(generic_reply(model, prompt_text), entry.benchmark, None)
    return Answer(content, entry.benchmark, correct)


# -- judge -------------------------------------------------------------------------------------

JUDGE_FENCE = "```json\n"
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans({ch: " " for ch in string.punctuation})
NOT_ATTEMPTED_PHRASES = (
    "i don't know",
    "i do not know",
    "i dont know",
    "not sure",
    "i cannot answer",
    "i can't answer",
    "unable to answer",
    "no answer",
)


def judge_block(question: str, reference: str, response: str) -> str:
    """The fenced block a judge request's last user message ends with, which the simulated
    judge reads back. ``datasets.grading.judge_messages`` writes the same block; a test in
    tests/simulator pins the two together."""
    body = json.dumps(
        {"question": question, "reference": reference, "response": response},
        ensure_ascii=False,
    )
    return f"```json\n{body}\n```"


def parse_judge_block(text: str) -> dict[str, str] | None:
    """The block ``judge_block`` wrote at the end of ``text``. JSON escapes newlines, so the
    block opens at the last ```json fence followed by a real newline, whatever came before."""
    body = text.rstrip()
    start = body.rfind(JUDGE_FENCE)
    if start < 0 or not body.endswith("```"):
        return None
    try:
        data = json.loads(body[start + len(JUDGE_FENCE) : -3])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("question", "reference", "response")
    ):
        return None
    return {k: data[k] for k in ("question", "reference", "response")}


def normalise_answer(text: str) -> str:
    text = text.lower().translate(_PUNCT_TABLE)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def judge_verdict(reference: str, response: str) -> Verdict:
    raw = " ".join(response.lower().split())
    if not raw or any(phrase in raw for phrase in NOT_ATTEMPTED_PHRASES):
        return "not_attempted"
    ref, resp = normalise_answer(reference), normalise_answer(response)
    if not resp:
        return "not_attempted"
    # Whole-word containment: "4" must not match inside "42".
    if ref and f" {ref} " in f" {resp} ":
        return "correct"
    return "incorrect"


def judge_reply(prompt_text: str | None) -> str:
    block = parse_judge_block(prompt_text or "")
    if block is None:
        # Deliberately not JSON: a judge that cannot read its input must fail the cell.
        return "I could not find the ```json block to judge."
    verdict = judge_verdict(block["reference"], block["response"])
    return json.dumps({"verdict": verdict})


# -- user simulator ----------------------------------------------------------------------------

_SENTENCE_RE = re.compile(r"[^.!?\n]+[.!?]?")


def user_reply(messages: list[dict[str, Any]], stop_after_turns: int) -> str:
    """Reply as the user of a scenario given in the system prompt: turn k states the scenario's
    k-th sentence; turn ``stop_after_turns`` thanks and ends with ``###STOP###``. The turn is the
    number of the simulator's own earlier replies, which arrive as ``assistant`` messages."""
    scenario = " ".join(
        content_text(m.get("content")) for m in messages if m.get("role") == "system"
    )
    sentences = [s.strip() for s in _SENTENCE_RE.findall(scenario) if s.strip()]
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if turn + 1 >= max(1, stop_after_turns):
        return f"Thank you, that is everything I needed. {USER_STOP}"
    if not sentences:
        return "Could you help me with my request?"
    sentence = sentences[turn % len(sentences)]
    return f"Hi. {sentence}" if turn == 0 else sentence
