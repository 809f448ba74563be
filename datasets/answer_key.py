"""The simulator's answer key, built from official-format dataset files (issue 24).

The simulator stands below the datasets layer and reads no benchmark file: it plays the
``AnswerKey`` it is handed, or the JSON one that ``AnswerKey.save`` wrote (``[answer_key] file``).
This module reads the files through the benchmark adapters, as a run loads them, so the key
recognises exactly the prompts the engine sends. The top layer (``srbench simulator``, the demo,
the bench scripts) calls it when a simulator config names ``[answer_key] sources``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import srbench.simulator
from datasets.benchmarks import get_adapter
from datasets.benchmarks.tau3 import domain_db
from datasets.official_prompts import (
    OfficialPrompting,
    PromptingUnavailable,
    lcb_messages,
    load_prompting,
)
from srbench.simulator.config import SimConfig
from srbench.simulator.oracle import AnswerKey, first_user_text, prompt_sha256, prompt_text_of

# Reference solutions for questions whose rows carry none (the bundled SciCode fixture
# problems), by benchmark and step number; shipped beside the simulator's bundled config.
REFERENCE_SOLUTIONS_PATH = Path(srbench.simulator.__file__).with_name("reference_solutions.json")


def answer_key_from_sources(
    sources: Iterable[tuple[str, str]],
    solutions_path: Path | None = REFERENCE_SOLUTIONS_PATH,
) -> AnswerKey:
    """The key of every question in ``sources`` ((benchmark, path) pairs read by the benchmark's
    adapter). ``solutions_path`` names the reference solutions known beside the files."""
    known = reference_solutions(solutions_path)
    key = AnswerKey()
    for benchmark_key, path in sources:
        adapter = get_adapter(benchmark_key)
        for question in adapter.load(Path(path)):
            if benchmark_key == "scicode":
                _add_scicode(key, adapter, question.payload, question.secret, known)
                continue
            messages = adapter.messages(question.payload)
            # Agent tasks are looked up by their opening message (srbench.simulator.agents).
            text = (
                first_user_text(messages) if adapter.kind == "agent" else prompt_text_of(messages)
            )
            payload = question.payload
            if benchmark_key == "tau3" and "db" not in payload:
                # A large τ³ database is referenced by hash, not embedded; the wrong agent
                # draws its plausible ids from it (tau_plan). Tasks of a domain share one object.
                payload = payload | {"db": domain_db(Path(path), payload)}
            if text is not None:
                key.add(text, question.benchmark, adapter.kind, question.secret, payload)
            if benchmark_key == "livecodebench" and (official := _official_lcb()) is not None:
                # The same problem asked in the package's own prompt (issue 37 item 3).
                official_text = prompt_text_of(lcb_messages(official, question.payload))
                if official_text is not None:
                    key.add(
                        official_text, question.benchmark, adapter.kind, question.secret, payload
                    )
    return key


def _official_lcb() -> OfficialPrompting | None:
    """LiveCodeBench's official prompt builder when its package is installed, else None (the
    key then knows sr-bench's prompts only)."""
    try:
        return load_prompting("livecodebench")
    except PromptingUnavailable:
        return None


def answer_key_write(sources: Iterable[tuple[str, str]], path: Path) -> Path:
    """Build the key of ``sources`` and save it as the JSON a simulator config names with
    ``[answer_key] file``; returns ``path``."""
    answer_key_from_sources(sources).save(path)
    return path


def answer_key_for_config(config: SimConfig) -> AnswerKey | None:
    """The key built from the config's ``[answer_key] sources``, or None when it names none (the
    simulator then reads its ``file``, if any, itself)."""
    if not config.answer_key_sources:
        return None
    return answer_key_from_sources(config.answer_key_sources)


def _add_scicode(
    key: AnswerKey,
    adapter: Any,
    payload: dict[str, Any],
    secret: dict[str, Any],
    known: dict[str, dict[str, str]],
) -> None:
    """One entry per sub-step, keyed by the user turn that asks for it (the driver sends one
    turn per step). A step's solution is the row's ``ground_truth_code`` or a known
    reference solution; all steps roll correctness on the opening step's prompt."""
    steps = secret.get("steps") or []
    prompts = [adapter.step_prompt(payload, i) for i in range(len(payload["sub_steps"]))]
    if not prompts:
        return
    roll = prompt_sha256(prompts[0])
    references = known.get("scicode") or {}
    for index, prompt in enumerate(prompts):
        step = steps[index] if index < len(steps) else {}
        number = str(step.get("step_number", ""))
        solution = step.get("ground_truth_code") or references.get(number)
        step_secret: dict[str, Any] = {"step": index, "steps": len(prompts)}
        if isinstance(solution, str) and solution.strip():
            step_secret["solution"] = solution
        key.add(prompt, "scicode", "code", step_secret, roll=roll)


def reference_solutions(path: Path | None = REFERENCE_SOLUTIONS_PATH) -> dict[str, dict[str, str]]:
    """{benchmark: {step or question id: code}} from the bundled file."""
    if path is None or not Path(path).is_file():
        return {}
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: dict(v) for k, v in document.items() if isinstance(v, dict)}
