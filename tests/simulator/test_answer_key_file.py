"""The simulator's answer key as a file (issue 24): the project builds it from dataset files
(``datasets/answer_key.py``), saves it as JSON, and the simulator — which reads no dataset file
itself — plays it from ``[answer_key] file``. The engine tests reach the simulator the same way
(tests/runs/engine_support.py ``simulator``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from datasets.answer_key import answer_key_for_config, answer_key_from_sources
from datasets.benchmarks import ADAPTERS, get_adapter
from runs.engine.code_grading import scicode_step_prompts
from runs.engine.tau import TauEnvironment
from srbench.simulator import agents
from srbench.simulator.config import DEFAULT_CONFIG_PATH, ConfigError, load_config
from srbench.simulator.oracle import (
    AnswerKey,
    entry_domain,
    first_user_text,
    prompt_text_of,
    subject_answer,
)
from srbench.simulator.server import create_app
from srbench.simulator.testing import running_simulator

SOURCES = [(key, str(get_adapter(key).fixture_path())) for key in sorted(ADAPTERS)]
MODELS = ("sim-strong", "sim-weak")
SEEDS = (1, 2, 3)
ACCURACIES = (0.0, 0.5, 1.0)


@pytest.fixture(scope="module")
def built() -> AnswerKey:
    return answer_key_from_sources(SOURCES)


def _prompts() -> list[tuple[str, str, dict[str, Any]]]:
    """(benchmark, prompt the engine sends, payload) for every fixture question: each SciCode
    step, an agent task's opening, else the last user message."""
    found = []
    for benchmark, path in SOURCES:
        adapter = get_adapter(benchmark)
        for question in adapter.load(Path(path)):
            messages = adapter.messages(question.payload)
            if benchmark == "scicode":
                texts = scicode_step_prompts(question.payload)
            elif adapter.kind == "agent":
                texts = [first_user_text(messages)]
            else:
                texts = [prompt_text_of(messages)]
            found.extend((benchmark, t, question.payload) for t in texts if t is not None)
    return found


def _tools(benchmark: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if benchmark == "tau3":
        return TauEnvironment.from_payload(payload).tool_schemas()
    return list(payload.get("tools") or [])


def test_a_saved_key_answers_every_fixture_prompt_exactly_as_the_built_one(built, tmp_path):
    path = tmp_path / "key.json"
    built.save(path)
    loaded = AnswerKey.load(path)
    prompts = _prompts()
    assert {b for b, _, _ in prompts} == set(ADAPTERS)
    assert len(loaded) == len(built) > 0
    for benchmark, prompt, payload in prompts:
        entry = built.lookup(prompt)
        assert entry is not None, (benchmark, prompt[:80])
        assert loaded.lookup(prompt) == entry
        for model in MODELS:
            for seed in SEEDS:
                for accuracy in ACCURACIES:
                    args = {"model": model, "seed": seed, "prompt_text": prompt}
                    rate = {"accuracy_for": lambda _b, a=accuracy: a}
                    assert subject_answer(loaded, **args, **rate) == subject_answer(
                        built, **args, **rate
                    ), (benchmark, model, seed, accuracy)
        if entry.kind == "agent":
            tools = _tools(benchmark, payload)
            for correct in (True, False):
                if "evaluation_criteria" in entry.secret:
                    # The wrong agent draws its ids from the task's database.
                    assert agents.tau_plan(loaded.lookup(prompt), correct, tools) == (
                        agents.tau_plan(entry, correct, tools)
                    )
                else:
                    assert agents.terminal_plan(loaded.lookup(prompt), correct) == (
                        agents.terminal_plan(entry, correct)
                    )


def test_the_key_keeps_scicode_rolls_and_ambiguous_openings(tmp_path):
    key = AnswerKey()
    key.add("step one", "scicode", "code", {"step": 0, "steps": 2}, roll="r" * 64)
    key.add("opening", "tau3", "agent", {"evaluation_criteria": {"actions": []}})
    key.add("opening", "tau3", "agent", {"evaluation_criteria": {"actions": [{"name": "x"}]}})
    assert key.lookup("opening") is None
    key.save(tmp_path / "key.json")
    loaded = AnswerKey.load(tmp_path / "key.json")
    assert loaded.lookup("step one").roll == "r" * 64
    assert loaded.lookup("opening") is None and len(loaded) == 2


def test_a_database_shared_by_tasks_is_written_once(built, tmp_path):
    path = tmp_path / "key.json"
    built.save(path)
    document = json.loads(path.read_text())
    tau_rows = [r for r in document["entries"].values() if r["benchmark"] == "tau3"]
    assert len(tau_rows) > len(document["databases"]) >= 1
    assert all(
        "db" not in r["payload"] and r["database"] in document["databases"] for r in tau_rows
    )


def test_a_file_that_is_not_a_saved_key_is_refused(tmp_path):
    (tmp_path / "other.json").write_text('{"entries": {}}')
    with pytest.raises(ValueError, match="not an answer key"):
        AnswerKey.load(tmp_path / "other.json")
    config = load_config(None, {"answer_key": {"file": str(tmp_path / "missing.json")}})
    with pytest.raises(ConfigError, match="cannot read"):
        create_app(config)


def _config_file(folder: Path, section: str) -> Path:
    path = folder / "simulator.toml"
    path.write_text(DEFAULT_CONFIG_PATH.read_text() + f"\n[answer_key]\n{section}\n")
    return path


def test_the_simulator_started_from_a_file_config_plays_the_key(built, tmp_path):
    """A relative ``file`` is read beside the config; the HTTP reply is the oracle's answer for
    the built key, right and wrong alike."""
    built.save(tmp_path / "key.json")
    config = _config_file(tmp_path, 'file = "key.json"')
    mcq = get_adapter("mmlu-pro")
    questions = mcq.load(mcq.fixture_path())
    fast = {"ttft_s": 0.0, "tokens_per_second": 0.0}
    # Loaded first, then overridden: the relative file stays resolved beside the config.
    with running_simulator(load_config(config), models={"sim-weak": fast}) as url:
        for question in questions:
            messages = mcq.messages(question.payload)
            body = {"model": "sim-weak", "messages": messages, "seed": 5}
            reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).json()
            # The model's accuracy on this question's domain (ModelSpec.domain_accuracy).
            text = prompt_text_of(messages)
            domain = entry_domain(built.lookup(text))
            spec = load_config(config).models["sim-weak"]
            expected = subject_answer(
                built,
                model="sim-weak",
                seed=5,
                prompt_text=text,
                accuracy_for=lambda benchmark, d=domain, m=spec: m.accuracy_for(benchmark, d),
            )
            assert expected.correct is not None
            assert reply["choices"][0]["message"]["content"] == expected.content


def test_sources_are_built_by_the_project_and_refused_by_the_simulator_alone(built, tmp_path):
    """`srbench simulator` builds the key from ``sources``; `python -m srbench.simulator` alone
    cannot read dataset files and says so instead of answering every question generically."""
    config_path = _config_file(tmp_path, f"sources = {json.dumps([list(s) for s in SOURCES])}")
    config = load_config(config_path)
    from_config = answer_key_for_config(config)
    assert from_config is not None and len(from_config) == len(built)
    assert answer_key_for_config(load_config(None)) is None
    with pytest.raises(ConfigError, match="srbench simulator"):
        create_app(config)
    alone = subprocess.run(
        [sys.executable, "-m", "srbench.simulator", "--config", str(config_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert alone.returncode == 2
    assert "reads no dataset files" in alone.stderr and "Traceback" not in alone.stderr


def test_srbench_simulator_hands_the_key_built_from_sources_to_the_server(
    built, tmp_path, monkeypatch
):
    """The `srbench simulator` verb (top layer) reads ``sources`` through the adapters and gives
    the simulator the key; the blocking server call is captured instead of run."""
    import srbench.simulator.server as server

    served: dict[str, Any] = {}
    monkeypatch.setattr(
        server, "serve", lambda config, **kwargs: served.update(kwargs, config=config)
    )
    config_path = _config_file(tmp_path, f"sources = {json.dumps([list(s) for s in SOURCES])}")
    call_command("benchmark", "simulator", "--config", str(config_path), "--port", "0")
    key = served["answer_key"]
    assert served["config"].answer_key_sources == tuple(SOURCES)
    for benchmark, prompt, _ in _prompts():
        assert key.lookup(prompt) == built.lookup(prompt), benchmark
