"""The oracle: decides whether a simulated model answers a known question correctly and writes a
well-formed answer; also the simulated judge and the simulated user.

A question is recognised by sha256 of the **last user message's content string** (text parts
joined by newlines) looked up in an ``AnswerKey``. Correctness is a seeded hash of
(seed, model, question) compared with the model's accuracy, so a model answers a given question
the same way whether it is called directly, streamed or not, or routed to by a MoM router.

Agent tasks (τ³, Terminal-Bench) are multi-turn: the last user message changes as the simulated
user speaks, so they are recognised by the **first** user message (the task's opening) and the
agent's progress is read from the tool calls already in the conversation (``agent_turn``).
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
from srbench.simulator.official_judge import official_judge_reply
from srbench.simulator.tokens import content_text

Kind = Literal["mcq", "judge", "grid", "code", "agent"]
Verdict = Literal["correct", "incorrect", "not_attempted"]

USER_STOP = "###STOP###"
# Reference solutions the simulator knows for questions whose rows carry none (the bundled
# SciCode fixture problems), by benchmark and step number.
REFERENCE_SOLUTIONS_PATH = Path(__file__).with_name("reference_solutions.json")


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
    return hashlib.sha256(prompt_text.encode("utf-8")).hexdigest()


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

    @classmethod
    def from_sources(
        cls,
        sources: Iterable[tuple[str, str]],
        solutions_path: Path | None = REFERENCE_SOLUTIONS_PATH,
    ) -> AnswerKey:
        """Build the key from official-format dataset files through the benchmark adapters.
        Imported here so the simulator runs (with an empty key) where they are absent.
        ``solutions_path`` names the reference solutions known beside the files."""
        from datasets.benchmarks import get_adapter

        known = reference_solutions(solutions_path)
        key = cls()
        for benchmark_key, path in sources:
            adapter = get_adapter(benchmark_key)
            for question in adapter.load(Path(path)):
                if benchmark_key == "scicode":
                    key.add_scicode(adapter, question.payload, question.secret, known)
                    continue
                messages = adapter.messages(question.payload)
                # Agent tasks are looked up by their opening message (see agent_turn).
                text = (
                    first_user_text(messages)
                    if adapter.kind == "agent"
                    else prompt_text_of(messages)
                )
                payload = question.payload
                if benchmark_key == "tau3" and "db" not in payload:
                    # A large τ³ database is referenced by hash, not embedded; the wrong agent
                    # draws its plausible ids from it (tau_plan).
                    from datasets.benchmarks.tau3 import domain_db

                    payload = payload | {"db": domain_db(Path(path), payload)}
                if text is not None:
                    key.add(text, question.benchmark, adapter.kind, question.secret, payload)
        return key

    def add_scicode(
        self,
        adapter: Any,
        payload: dict[str, Any],
        secret: dict[str, Any],
        known: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """One entry per sub-step, keyed by the user turn that asks for it (the driver sends one
        turn per step). A step's solution is the row's ``ground_truth_code`` or a known
        reference solution; all steps roll correctness on the opening step's prompt."""
        steps = secret.get("steps") or []
        prompts = [adapter.step_prompt(payload, i) for i in range(len(payload["sub_steps"]))]
        if not prompts:
            return
        roll = prompt_sha256(prompts[0])
        references = (known or {}).get("scicode") or {}
        for index, prompt in enumerate(prompts):
            step = steps[index] if index < len(steps) else {}
            number = str(step.get("step_number", ""))
            solution = step.get("ground_truth_code") or references.get(number)
            step_secret: dict[str, Any] = {"step": index, "steps": len(prompts)}
            if isinstance(solution, str) and solution.strip():
                step_secret["solution"] = solution
            self.add(prompt, "scicode", "code", step_secret, roll=roll)


def reference_solutions(path: Path | None = REFERENCE_SOLUTIONS_PATH) -> dict[str, dict[str, str]]:
    """{benchmark: {step or question id: code}} from the simulator's bundled file."""
    if path is None or not Path(path).is_file():
        return {}
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: dict(v) for k, v in document.items() if isinstance(v, dict)}


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
    """``accuracy_for(benchmark) -> float`` is the model's accuracy on that benchmark."""
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


# -- agents (τ³, Terminal-Bench) ---------------------------------------------------------------

# The simulated agent ends its final answer with this sentence, and the simulated user ends the
# episode when it reads it: a real agent's closing offer of more help is the same cue.
AGENT_CLOSING = "Is there anything else I can help you with?"
# Tools named like this only read (τ² naming); the wrong τ³ path needs a tool that writes.
READ_ONLY_PREFIXES = ("get_", "search_", "find_", "list_", "lookup_", "calculate", "think")
READ_ONLY_NAMES = frozenset({"transfer_to_human_agents"})
TERMINAL_TOOL_NAME = "terminal"
SOLUTION_SCRIPTS = ("solve.sh", "solution.sh")
_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


@dataclass(frozen=True)
class AgentAction:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class AgentPlan:
    """Everything one simulated model does on one agent task: its tool calls in order, then a
    final text answer."""

    actions: tuple[AgentAction, ...]
    final: str


@dataclass(frozen=True)
class AgentTurn:
    """The next turn: a single tool call, or (``tool_name`` None) the final text."""

    content: str
    tool_name: str | None
    arguments: str | None
    benchmark: str
    correct: bool


def _looks_read_only(name: str) -> bool:
    return name in READ_ONLY_NAMES or name.startswith(READ_ONLY_PREFIXES)


def _values_by_key(data: Any, found: dict[str, list[Any]] | None = None) -> dict[str, list[Any]]:
    """Every scalar in a τ³ database under each field name, in document order: the pool the
    wrong agent draws plausible ids from (``loan_id`` -> ["L-1", "L-2", ...])."""
    found = {} if found is None else found
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                bucket = found.setdefault(str(key), [])
                if value not in bucket:
                    bucket.append(value)
            else:
                _values_by_key(value, found)
    elif isinstance(data, list):
        for item in data:
            _values_by_key(item, found)
    return found


def _tool_params(tool: dict[str, Any]) -> tuple[str, list[str]]:
    function = tool.get("function") or {}
    params = function.get("parameters") or {}
    props = params.get("properties") or {}
    return str(function.get("name")), list(params.get("required") or props)


def _perturbed(action: AgentAction, pool: dict[str, list[Any]]) -> AgentAction:
    """The same call on a different record: the first argument with another value of the same
    field in the database takes it; otherwise the first argument is made unrecognisable."""
    for name, value in action.arguments.items():
        others = [v for v in pool.get(name, []) if v != value]
        if others:
            return AgentAction(action.name, action.arguments | {name: others[0]})
    for name, value in action.arguments.items():
        changed = f"{value}-X" if isinstance(value, str) else 0 if value else 1
        return AgentAction(action.name, action.arguments | {name: changed})
    return action


def _unrequested_write(
    gold: list[AgentAction], tools: list[dict[str, Any]], pool: dict[str, list[Any]]
) -> AgentAction | None:
    """A change nobody asked for: the first offered write-looking tool the task does not use,
    its arguments taken from the task's own calls or else the first value in the database."""
    known: dict[str, Any] = {}
    for action in gold:
        for name, value in action.arguments.items():
            known.setdefault(name, value)
    used = {a.name for a in gold}
    for tool in tools:
        name, required = _tool_params(tool)
        if name in used or _looks_read_only(name):
            continue
        arguments = {}
        for param in required:
            if param in known:
                arguments[param] = known[param]
            elif pool.get(param):
                arguments[param] = pool[param][0]
            else:
                break
        else:
            return AgentAction(name, arguments)
    return None


def tau_plan(entry: KeyEntry, correct: bool, tools: list[dict[str, Any]]) -> AgentPlan:
    """Correct: the gold assistant actions, then a final answer with every required output.
    Wrong: the gold actions with the last write sent to another record (or, when the task
    writes nothing, one unrequested write), then a final answer without the required outputs —
    so the reward is 0 whether the task is graded on the database or on what is said."""
    criteria = entry.secret.get("evaluation_criteria") or {}
    gold = [
        AgentAction(str(a.get("name")), dict(a.get("arguments") or {}))
        for a in criteria.get("actions") or []
        if a.get("requestor", "assistant") == "assistant"
    ]
    info = [str(i) for i in criteria.get("communicate_info") or []]
    if correct:
        summary = f" For your records: {'; '.join(info)}." if info else ""
        return AgentPlan(tuple(gold), f"All done.{summary} {AGENT_CLOSING}")
    pool = _values_by_key(entry.payload.get("db") or {})
    actions = list(gold)
    writes = [i for i, a in enumerate(actions) if not _looks_read_only(a.name)]
    if writes:
        actions[writes[-1]] = _perturbed(actions[writes[-1]], pool)
    else:
        extra = _unrequested_write(gold, tools, pool)
        if extra is not None:
            actions.append(extra)
    return AgentPlan(tuple(actions), f"I have updated your account as requested. {AGENT_CLOSING}")


def split_shell_script(script: str) -> list[str]:
    """A solution script as the commands an agent would type one at a time: blank lines,
    comments and the shebang dropped; a heredoc or a backslash-continued line kept whole."""
    commands: list[str] = []
    current: list[str] = []
    terminator: str | None = None
    for line in script.splitlines():
        if terminator is not None:
            current.append(line)
            if line.strip() == terminator:
                terminator = None
                commands.append("\n".join(current))
                current = []
            continue
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current.append(line)
        heredoc = _HEREDOC_RE.search(line)
        if heredoc:
            terminator = heredoc.group(2)
        elif not line.endswith("\\"):
            commands.append("\n".join(current))
            current = []
    if current:
        commands.append("\n".join(current))
    return commands


def solution_commands(secret: dict[str, Any]) -> list[str]:
    """The commands of a Terminal-Bench task's reference solution (solve.sh / solution.sh, or a
    legacy solution.yaml's keystroke entries)."""
    files = [f for f in secret.get("solution") or [] if isinstance(f, dict) and "content" in f]
    # Base64 entries are binary files, never a script to type.
    files = [f for f in files if f.get("encoding", "utf-8") == "utf-8"]
    for file in files:
        if str(file.get("path", "")).rsplit("/", 1)[-1] in SOLUTION_SCRIPTS:
            return split_shell_script(str(file["content"]))
    for file in files:
        if str(file.get("path", "")).endswith("solution.yaml"):
            import yaml  # the dataset loaders' dependency; only legacy tasks need it here

            steps = yaml.safe_load(str(file["content"])) or []
            return [str(s["command"]).rstrip("\n") for s in steps if isinstance(s, dict)]
    return []


def terminal_plan(entry: KeyEntry, correct: bool) -> AgentPlan:
    """Correct: the reference solution, one command per call. Wrong: a look around, then the
    first solution command inside a subshell that is never closed — bash rejects it as a syntax
    error before running any of it, so the task is left unsolved."""
    commands = solution_commands(entry.secret)
    if correct:
        actions = [AgentAction(TERMINAL_TOOL_NAME, {"command": c}) for c in commands]
        return AgentPlan(tuple(actions), "The task is complete.")
    broken = ["ls -la"] + ([f"(\n{commands[0]}"] if commands else [])
    actions = [AgentAction(TERMINAL_TOOL_NAME, {"command": c}) for c in broken]
    return AgentPlan(tuple(actions), "I could not get the commands to work.")


def _calls_made(messages: list[dict[str, Any]]) -> int:
    """The agent's progress through its plan: the tool calls it has already made."""
    count = 0
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            count += len(calls)
    return count


def agent_turn(
    key: AnswerKey,
    *,
    model: str,
    seed: int,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    accuracy_for: Any,
) -> AgentTurn | None:
    """The simulated agent's next turn on a known agent task, or None (not an agent task: the
    caller falls back to its generic tool behaviour). Correctness is rolled once per (seed,
    model, task), as for single-turn questions, so every turn of one conversation follows the
    same plan — provided the driver sends the same ``seed`` on every call of the episode."""
    opening = first_user_text(messages)
    entry = key.lookup(opening)
    if entry is None or opening is None or entry.kind != "agent":
        return None
    offered = [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    names = {str(t["function"].get("name")) for t in offered}
    sha = prompt_sha256(opening)
    correct = is_correct(seed, model, sha, float(accuracy_for(entry.benchmark)))
    if "evaluation_criteria" in entry.secret:
        plan = tau_plan(entry, correct, offered)
    elif TERMINAL_TOOL_NAME in names and "solution" in entry.secret:
        plan = terminal_plan(entry, correct)
    else:
        return None
    done = _calls_made(messages)
    if done < len(plan.actions):
        action = plan.actions[done]
        arguments = json.dumps(action.arguments, ensure_ascii=False, sort_keys=True)
        return AgentTurn("", action.name, arguments, entry.benchmark, correct)
    return AgentTurn(plan.final, None, None, entry.benchmark, correct)


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
