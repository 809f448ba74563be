"""The oracle: decides whether a simulated model answers a known question correctly and writes a
well-formed answer; also the simulated judge and the simulated user (the simulated agent of
multi-turn tasks is ``agents.py``).

A question is recognised by sha256 of the **last user message's content string** (text parts
joined by newlines) looked up in an ``AnswerKey``. Correctness is a seeded hash of
(seed, model, question) compared with the model's accuracy, so a model answers a given question
the same way whether it is called directly, streamed or not, or routed to by a MoM router.

The simulator reads no benchmark file: an ``AnswerKey`` is handed to it, or loaded from the JSON
that ``AnswerKey.save`` wrote (``[answer_key] file`` in its config). The project builds keys
from official-format dataset files in ``datasets/answer_key.py`` (issue 24).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from srbench.canonical import canonical_json
from srbench.simulator.official_judge import official_judge_reply
from srbench.simulator.tokens import content_text

Kind = Literal["mcq", "judge", "grid", "code", "agent"]
Verdict = Literal["correct", "incorrect", "not_attempted"]

USER_STOP = "###STOP###"
# The simulated agent ends its final answer with this sentence, and the simulated user ends the
# episode when it reads it: a real agent's closing offer of more help is the same cue.
AGENT_CLOSING = "Is there anything else I can help you with?"
# The first line of a saved answer key; ``AnswerKey.load`` refuses any other.
ANSWER_KEY_FORMAT = "srbench-simulator-answer-key/1"


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


def first_user_text(messages: list[dict[str, Any]]) -> str | None:
    """The content string of the first user message: an agent task's opening."""
    for message in messages:
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return None


def prompt_sha256(prompt_text: str) -> str:
    # surrogatepass: a lone surrogate a request carried (JSON's \udXXX) hashes too.
    return hashlib.sha256(prompt_text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class KeyEntry:
    benchmark: str
    kind: str
    secret: dict[str, Any]
    # Public payload, used for the number of options of an MCQ.
    payload: dict[str, Any] = field(default_factory=dict)
    # The prompt hash correctness is rolled on when it is not this entry's own: every step of a
    # SciCode problem shares its opening step's, so the *problem* is right with the accuracy.
    roll: str | None = None


class AnswerKey:
    def __init__(self) -> None:
        self._entries: dict[str, KeyEntry] = {}
        # Agent tasks sharing an opening message cannot be told apart by the simulated agent;
        # it plays none of them rather than the wrong one.
        self._ambiguous: set[str] = set()

    def __len__(self) -> int:
        return len(self._entries)

    def add(
        self,
        prompt_text: str,
        benchmark: str,
        kind: str,
        secret: dict[str, Any],
        payload: dict[str, Any] | None = None,
        *,
        roll: str | None = None,
    ) -> str:
        sha = prompt_sha256(prompt_text)
        entry = KeyEntry(benchmark, kind, dict(secret), dict(payload or {}), roll)
        previous = self._entries.get(sha)
        if kind == "agent" and previous is not None and previous != entry:
            self._ambiguous.add(sha)
        self._entries[sha] = entry
        return sha

    def lookup(self, prompt_text: str | None) -> KeyEntry | None:
        if prompt_text is None:
            return None
        sha = prompt_sha256(prompt_text)
        if sha in self._ambiguous:
            return None
        return self._entries.get(sha)

    def save(self, path: str | Path) -> None:
        """Write the key as JSON (atomically: a reader sees the old file or the new one).
        Every entry is kept under its prompt hash with its roll, and the ambiguous hashes too.
        A τ³ database that several tasks share is written once (``databases``), not per task.
        Keys keep their order: the wrong agent draws ids from a database in document order."""
        databases: dict[int, tuple[str, Any]] = {}
        entries = {}
        for sha, entry in self._entries.items():
            row: dict[str, Any] = {
                "benchmark": entry.benchmark,
                "kind": entry.kind,
                "secret": entry.secret,
                "payload": entry.payload,
                "roll": entry.roll,
            }
            db = entry.payload.get("db")
            if isinstance(db, dict):
                ref, _ = databases.setdefault(id(db), (str(len(databases)), db))
                row["payload"] = {k: v for k, v in entry.payload.items() if k != "db"}
                row["database"] = ref
            entries[sha] = row
        document = {
            "format": ANSWER_KEY_FORMAT,
            "entries": entries,
            "ambiguous": sorted(self._ambiguous),
            "databases": dict(databases.values()),
        }
        target = Path(path)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(document, out, ensure_ascii=False, separators=(",", ":"))
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path) -> AnswerKey:
        """The key ``save`` wrote; a file in any other format is refused, never read as empty."""
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(document, dict) or document.get("format") != ANSWER_KEY_FORMAT:
            raise ValueError(f"{path}: not an answer key saved by AnswerKey.save")
        databases = document.get("databases") or {}
        key = cls()
        for sha, row in (document.get("entries") or {}).items():
            payload = dict(row.get("payload") or {})
            if row.get("database") is not None:
                # One shared object per database, as when the key was built.
                payload["db"] = databases[row["database"]]
            key._entries[sha] = KeyEntry(
                str(row["benchmark"]), str(row["kind"]), dict(row["secret"]), payload, row["roll"]
            )
        key._ambiguous = set(document.get("ambiguous") or ())
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


def entry_domain(entry: KeyEntry | None) -> str | None:
    """A question's domain: its ``category`` (MMLU-Pro, HLE), lower-cased; else None."""
    category = None if entry is None else entry.payload.get("category")
    return str(category).lower() if category else None


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
    if not choices:
        # Only a reference that normalises to nothing gets here — above all the HLE
        # multiple-choice key "A", an article: another letter is the plausible wrong answer.
        letter = reference.strip().strip("()").upper()
        if len(letter) == 1 and letter in LETTERS:
            choices = [x for x in LETTERS[: max(4, LETTERS.index(letter) + 1)] if x != letter]
        else:
            choices = list(WRONG_FACTS)
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


_RETURN_RE = re.compile(r"^([ \t]+)return (.+)$", re.MULTILINE)


def wrong_program(solution: str) -> str:
    """A plausible wrong version of a reference solution: the same code with its last return
    value scaled by 1.5 (a slipped factor), so it runs but answers wrongly; a program without
    a return statement stops without output instead."""
    returns = list(_RETURN_RE.finditer(solution))
    if not returns:
        return "raise NotImplementedError('simulated wrong answer')\n"
    last = returns[-1]
    value = last.group(2).rstrip()
    return (
        f"{solution[: last.start()]}{last.group(1)}return 1.5 * ({value}){solution[last.end() :]}"
    )


def code_answer(entry: KeyEntry, correct: bool, salt: str = "") -> str | None:
    """A reference solution when the key has one; otherwise, for LiveCodeBench rows (whose
    secret holds only tests), a program that answers from the hidden tests it was built from —
    the simulator is an oracle, so it may; it passes the real sandboxed grader exactly when
    ``correct``. The wrong variant runs cleanly but prints or returns a wrong value. On a
    SciCode problem rolled wrong, one step (chosen by ``salt``) is wrong and the rest right,
    which fails the problem as a single slip does."""
    solution = entry.secret.get("solution")
    tests = entry.secret.get("tests")
    if isinstance(solution, str):
        steps, step = entry.secret.get("steps"), entry.secret.get("step")
        if not correct and isinstance(steps, int) and isinstance(step, int) and steps > 1:
            correct = step != stable_index(steps, "scicode-wrong-step", salt)
        body = solution if correct else wrong_program(solution)
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
    """``accuracy_for(benchmark) -> float`` is the model's accuracy on this question of that
    benchmark (the caller knows its domain: :func:`entry_domain`)."""
    entry = key.lookup(prompt_text)
    if entry is None or prompt_text is None:
        return Answer(generic_reply(model, prompt_text), None, None)
    # Steps of one SciCode problem roll on the problem's opening prompt (KeyEntry.roll).
    sha = entry.roll or prompt_sha256(prompt_text)
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
        content = code_answer(entry, correct, salt)
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
    if not ref:
        # A reference that is all article (the multiple-choice key "A") keeps its words.
        ref = " ".join(reference.lower().translate(_PUNCT_TABLE).split())
        resp = " ".join(response.lower().translate(_PUNCT_TABLE).split())
    if not resp:
        return "not_attempted"
    # Whole-word containment: "4" must not match inside "42".
    if ref and f" {ref} " in f" {resp} ":
        return "correct"
    return "incorrect"


def judge_reply(prompt_text: str | None) -> str:
    official = official_judge_reply(prompt_text or "", judge_verdict)
    if official is not None:
        return official
    block = parse_judge_block(prompt_text or "")
    if block is None:
        # Deliberately not JSON: a judge that cannot read its input must fail the cell.
        return "I could not find the ```json block to judge."
    verdict = judge_verdict(block["reference"], block["response"])
    return json.dumps({"verdict": verdict})


# -- user simulator ----------------------------------------------------------------------------

_SENTENCE_RE = re.compile(r"[^.!?\n]+[.!?]?")
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9-]{2,}")
# "What you know: ..." — the field labels of a τ³ scenario (runs.engine.tau.user_system_prompt).
_LABEL_RE = re.compile(r"^[A-Z][A-Za-z ]{0,40}:\s+")
# The heading after which runs.engine.tau puts the task's scenario; without it the whole
# system prompt is the scenario (the original, harness-independent behaviour).
SCENARIO_HEADING = "## Scenario"
_FIRST_PERSON = (
    (re.compile(r"^You are\b"), "I am"),
    (re.compile(r"^You\b"), "I"),
    (re.compile(r"\bYour\b"), "My"),
    (re.compile(r"\byour\b"), "my"),
)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.findall(text) if s.strip()]


def _first_person(sentence: str) -> str:
    for pattern, replacement in _FIRST_PERSON:
        sentence = pattern.sub(replacement, sentence)
    return sentence


def _most_relevant(sentences: list[str], question: str) -> str | None:
    """The scenario sentence sharing most words with the agent's last message (first on a tie),
    so that asked for an id the simulated user gives the sentence with the id."""
    asked = set(_WORD_RE.findall(question.lower()))
    best, best_overlap = None, 0
    for sentence in sentences:
        overlap = len(asked & set(_WORD_RE.findall(sentence.lower())))
        if overlap > best_overlap:
            best, best_overlap = sentence, overlap
    return best


def user_reply(messages: list[dict[str, Any]], stop_after_turns: int) -> str:
    """Reply as the user of a scenario given in the system prompt. The turn is the number of the
    simulator's own earlier replies, which arrive as ``assistant`` messages (roles flipped).
    It ends with ``###STOP###`` once the agent closes with ``AGENT_CLOSING`` or at turn
    ``stop_after_turns``. Otherwise, with a ``## Scenario`` section, it answers with the
    scenario sentence most relevant to the agent's last message, in the first person; without
    one, turn k states the system prompt's k-th sentence."""
    system = " ".join(content_text(m.get("content")) for m in messages if m.get("role") == "system")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    last_agent = next(
        (content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"),
        "",
    )
    if turn and AGENT_CLOSING.lower() in last_agent.lower():
        return f"No, that is all. Thank you! {USER_STOP}"
    if turn + 1 >= max(1, stop_after_turns):
        return f"Thank you, that is everything I needed. {USER_STOP}"
    _, heading, scenario = system.partition(SCENARIO_HEADING)
    if heading:
        lines = [_LABEL_RE.sub("", line.strip()) for line in scenario.splitlines()]
        sentences = _sentences("\n".join(lines))
        chosen = _most_relevant(sentences, last_agent)
        if chosen is not None:
            return _first_person(chosen)
    else:
        sentences = _sentences(system)
    if not sentences:
        return "Could you help me with my request?"
    sentence = sentences[turn % len(sentences)]
    if heading:
        sentence = _first_person(sentence)
    return f"Hi. {sentence}" if turn == 0 else sentence
