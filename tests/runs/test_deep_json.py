"""JSON from a model, a server or a model's program nested past Python's parser (a
RecursionError, not a ValueError) is read as "not JSON" wherever it is parsed — never an
exception out of the engine (R15: hostile input)."""

from __future__ import annotations

import types

from runs.engine import code_grading
from runs.engine.calls import http_error_text
from runs.engine.router_client import _router_message
from runs.engine.terminal import tool_command

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_tool_calls_arguments_nested_too_deep_run_nothing() -> None:
    assert tool_command(DEEP) is None
    assert tool_command('{"command": "ls"}') == "ls"


def test_an_error_body_nested_too_deep_is_shown_as_text() -> None:
    text = http_error_text(500, "Internal Server Error", DEEP.encode())
    assert text.startswith("HTTP 500") and "[[[" in text


def test_a_routers_refusal_nested_too_deep_is_shown_as_text() -> None:
    assert _router_message(DEEP.encode()).startswith("[[[")


def test_a_programs_output_nested_too_deep_is_a_wrong_answer() -> None:
    result = types.SimpleNamespace(
        reason="ok", exit_code=0, timed_out=False, stdout=DEEP.encode(), stderr=b""
    )
    test = {"testtype": "functional", "output": "[1]"}
    assert code_grading._lcb_test_status(result, test) == "wrong_answer"  # type: ignore[arg-type]
