"""Official prompts and LiveCodeBench's official grader in a run (issue 37 item 3).

A plan's `official_prompting` (frozen per benchmark in the manifest, `datasets.official_prompts`)
changes what the subject is asked: LiveCodeBench problems in the package's own chat prompt,
SciCode problems one single-turn prompt per step from the package's multistep template. The
sr-bench grader then grades the answers as always (the score); for LiveCodeBench the package's
`testing_util.run_test` grades the same answer too, as the official outcome beside it
(`grade["official"]`), never changing `correct`.

The official grader runs model code in its own process, as upstream does: here that process is
the project's sandbox (runs.engine.sandbox), never the worker. Upstream's rule needs the hidden
tests' expected outputs in that process, so they enter this sandbox (the sr-bench grader keeps
them outside); model code that reads them can only forge its own official outcome, which is why
the official outcome is reported beside the sr-bench score and never instead of it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import secrets
from typing import TYPE_CHECKING, Any

from datasets import official_prompts as op
from runs.engine.code_grading import LCB_LIMITS, LCB_TEST_TIMEOUT_S
from runs.engine.sandbox import sandbox_run
from runs.engine.sandbox_command import sandbox_python

if TYPE_CHECKING:
    from runs.engine import store
    from runs.engine.calls import Caller

LCB_OFFICIAL_SCORER = "lcb-official-testing_util/1"
# What each of run_test's per-test results means (testing_util.py, grade_stdio/_call_based).
LCB_RESULT_CODES = {1: "passed", 0: "failed", -1: "runtime_error", -2: "wrong_answer"}
LCB_RESULT_CODES |= {-3: "timeout", -4: "compile_error"}

# Runs inside the sandbox: the package's testing_util.py, loaded from its own file (its package
# __init__ imports tqdm and the other metrics), run on the job read from stdin; the outcome is
# the last line that starts with the job's nonce (the program under test prints too).
LCB_OFFICIAL_RUNNER = """\
import importlib.util, json, sys

job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
spec = importlib.util.spec_from_file_location("testing_util", "testing_util.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
results, metadata = module.run_test(
    job["sample"], test=job["code"], debug=False, timeout=job["timeout"]
)
codes = [int(r) for r in results]
error = metadata.get("error_code") if isinstance(metadata, dict) else None
line = json.dumps({"results": codes, "error_code": error})
sys.__stdout__.write("\\n" + job["nonce"] + " " + line + "\\n")
sys.__stdout__.flush()
"""


def frozen_entry(manifest: dict[str, Any], benchmark: str) -> dict[str, Any] | None:
    return (manifest["benchmarks"].get(benchmark) or {}).get("official_prompting")


def subject_messages(manifest: dict[str, Any], benchmark: str, payload: dict[str, Any]) -> Any:
    """The official first messages of a LiveCodeBench case when the plan froze them, else None
    (sr-bench's). Raises PromptingUnavailable when the installed package is not the frozen one."""
    prompting = op.frozen_prompting(benchmark, frozen_entry(manifest, benchmark))
    if prompting is None or benchmark != "livecodebench":
        return None
    return op.lcb_messages(prompting, payload)


def lcb_sample(payload: dict[str, Any], secret: dict[str, Any]) -> dict[str, Any]:
    """The sample `run_test` reads, as the package's `get_evaluation_sample` builds it: every
    test (public first), and the function name the problem's metadata gives."""
    tests = secret["tests"]
    return {
        "input_output": json.dumps(
            {
                "inputs": [t["input"] for t in tests],
                "outputs": [t["output"] for t in tests],
                "fn_name": payload.get("func_name"),
            }
        )
    }


def _parse_outcome(stdout: bytes, nonce: str, tests: int) -> tuple[list[int], Any] | None:
    lines = [
        line
        for line in stdout.decode("utf-8", "replace").splitlines()
        if line.startswith(nonce + " ")
    ]
    if not lines:
        return None
    try:
        data = json.loads(lines[-1][len(nonce) + 1 :])
    except json.JSONDecodeError:
        return None
    codes = data.get("results") if isinstance(data, dict) else None
    if (
        not isinstance(codes, list)
        or len(codes) > tests
        or not all(type(c) is int and c in LCB_RESULT_CODES for c in codes)
    ):
        return None
    error = data.get("error_code")
    return codes, error if type(error) is int else None


def grade_livecodebench_official(
    *, answer: str, payload: dict[str, Any], secret: dict[str, Any], frozen: dict[str, Any]
) -> dict[str, Any]:
    """The package's grader on one answer, in the sandbox: its `extract_code`, then
    `run_test` with upstream's per-test timeout and its global limit ((timeout + 1) per test
    + 5 s). Correct as upstream's pass@1 counts it: every result positive. No result (the
    global limit, a crash, a forged line) counts every test failed, as upstream does."""
    head = {"scorer": LCB_OFFICIAL_SCORER, "grader_sha256": frozen["grader"]["sha256"]}
    try:
        prompting = op.frozen_prompting("livecodebench", frozen)
        assert prompting is not None
        testing_util = prompting.read(op.LCB_TESTING_UTIL)
    except op.PromptingUnavailable as exc:
        return head | {"status": "not_run", "reason": str(exc)}
    code = op.lcb_extract_code(prompting, answer)
    tests = len(secret["tests"])
    timeout = int(LCB_TEST_TIMEOUT_S)
    nonce = secrets.token_hex(16)
    job = {"sample": lcb_sample(payload, secret), "code": code, "timeout": timeout}
    wall = float((timeout + 1) * tests + 5)
    limits = dataclasses.replace(LCB_LIMITS, wall_s=wall, cpu_s=wall)
    result = sandbox_run(
        argv=[sandbox_python(), "runner.py"],
        files={"runner.py": LCB_OFFICIAL_RUNNER.encode("utf-8"), "testing_util.py": testing_util},
        stdin=json.dumps(job | {"nonce": nonce}).encode("utf-8"),
        limits=limits,
    )
    parsed = _parse_outcome(result.stdout, nonce, tests)
    if parsed is None:
        codes, error, note = [-1] * tests, None, f"no result from run_test ({result.reason})"
    else:
        (codes, error), note = parsed, None
    correct = bool(codes) and all(c > 0 for c in codes)
    detail = head | {
        "status": "graded",
        "correct": correct,
        "results": [LCB_RESULT_CODES[c] for c in codes],
        "error_code": error,
    }
    return detail | ({"note": note} if note else {})


async def scicode_official_turns(
    d: Caller, cell: store.ClaimedCell, target: store.TargetInfo, prompting: op.OfficialPrompting
) -> tuple[list[str | None], dict[str, Any]] | None:
    """SciCode asked as upstream asks it: per sub-step one single-turn prompt from the
    package's template, carrying the code it kept of each earlier reply; the steps upstream
    never asks take the package's code instead, in the prompts and in the grading. Returns
    (the replies per step, None for those steps; the secret the grader reads) or None when a
    turn ended the cell."""
    payload = cell.payload
    previous: list[str] = []
    replies: list[str | None] = []
    calls = 0
    for index, step in enumerate(payload["sub_steps"]):
        number = str(step["step_number"])
        gold = op.scicode_gold_code(prompting, number, step["function_header"])
        if gold is not None:
            previous.append(gold)
            replies.append(None)
            continue
        prompt = op.scicode_step_prompt(prompting, payload, index + 1, previous)
        outcome = await d.turn(
            cell,
            role="subject",
            sequence=calls,
            target=target,
            messages=[{"role": "user", "content": prompt}],
            calls_made=calls,
        )
        if outcome is None:
            return None
        calls += 1
        replies.append(outcome.content)
        previous.append(op.scicode_reply_code(prompting, outcome.content))
    return replies, _with_gold_steps(prompting, payload, cell.secret)


def _with_gold_steps(
    prompting: op.OfficialPrompting, payload: dict[str, Any], secret: dict[str, Any]
) -> dict[str, Any]:
    """The secret the grader reads: the steps the package fills carry its file as gold code
    (where the row carries none), so the grader runs it there and does not score them."""
    steps = copy.deepcopy(secret.get("steps") or [])
    for index, step in enumerate(payload["sub_steps"]):
        number = str(step["step_number"])
        gold = number in op.SCICODE_GOLD_FILES and index < len(steps)
        if gold and not steps[index].get("ground_truth_code"):
            steps[index]["ground_truth_code"] = op.scicode_gold_source(prompting, number)
    return {**secret, "steps": steps}


def with_official(
    manifest: dict[str, Any],
    benchmark: str,
    *,
    answer: str,
    payload: dict[str, Any],
    secret: dict[str, Any],
    detail: dict[str, Any],
) -> dict[str, Any]:
    """A code grade with LiveCodeBench's official outcome beside it when the plan froze
    official prompting (the engine's episode and the ledger's settlement alike)."""
    frozen = frozen_entry(manifest, benchmark)
    if frozen is None or benchmark != "livecodebench":
        return detail
    official = grade_livecodebench_official(
        answer=answer, payload=payload, secret=secret, frozen=frozen
    )
    return {**detail, "official": official}


def scicode_stored_replies(
    manifest: dict[str, Any],
    payload: dict[str, Any],
    secret: dict[str, Any],
    contents: list[str],
) -> tuple[list[str | None], dict[str, Any]] | None:
    """A SciCode cell's stored subject replies (in sequence order) put back on its steps as
    `scicode_official_turns` asked them: the steps the package fills get None and the
    package's code as gold. None when the plan did not freeze official prompting; raises
    PromptingUnavailable when the installed package is not the frozen one."""
    prompting = op.frozen_prompting("scicode", frozen_entry(manifest, "scicode"))
    if prompting is None:
        return None
    replies: list[str | None] = []
    asked = iter(contents)
    for step in payload["sub_steps"]:
        if str(step["step_number"]) in op.SCICODE_GOLD_FILES:
            replies.append(None)
            continue
        reply = next(asked, None)
        if reply is None:
            break
        replies.append(reply)
    return replies, _with_gold_steps(prompting, payload, secret)
