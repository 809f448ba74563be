"""Every verb ends the same way when the API stays unreachable (issue 13): exit 3 and one
`error:` line, never a traceback; any other CliError is exit 2. One guard for all verbs."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from srbench import api_client as c

# One invocation of every verb that talks to the API (arguments only need to parse).
VERBS = [
    ["prepare", "--benchmark", "mmlu-pro", "--profile", "smoke"],
    ["prepare", "--benchmark", "all", "--profile", "smoke"],
    ["datasets"],
    ["compose", "--source", "1"],
    ["questions", "1"],
    ["compare", "1", "2"],
    ["reconcile-usage", "1"],
    ["regrade", "1"],
    ["export", "1"],
    ["runs"],
    ["show", "1"],
    ["report", "1"],
    ["cancel", "1"],
    ["targets"],
    ["plan", "--dataset", "1", "--target", "a"],
    ["run", "--dataset", "1", "--target", "a", "--detach"],
    ["recover-plan", "1", "--mode", "failed"],
    ["lineage", "1"],
    ["recover", "1", "--plan", "PLAN", "--idempotency-key", "k"],
]


def run(args: list[str], capsys, tmp_path) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    plan = tmp_path / "plan.json"  # a reviewed recovery plan for `recover`
    plan.write_text('{"parent_run": 1, "mode": "failed", "selected_cells": [1]}')
    args = [str(plan) if a == "PLAN" else a for a in args]
    capsys.readouterr()
    try:
        call_command("benchmark", *args, "--url", "http://127.0.0.1:9", "--token", "t")
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args", VERBS, ids=lambda a: a[0])
def test_an_api_that_stays_away_is_exit_3_with_one_line(
    args, capsys, monkeypatch, tmp_path
) -> None:
    def away(self, method, path, **kwargs):  # type: ignore[no-untyped-def]
        raise c.ApiUnreachable(f"cannot reach the srbench API; gave up retrying {path}")

    monkeypatch.setattr(c.ApiClient, "request", away)
    code, err = run(args, capsys, tmp_path)
    assert code == c.EXIT_UNREACHABLE == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err


@pytest.mark.parametrize("args", VERBS, ids=lambda a: a[0])
def test_any_other_refusal_is_exit_2_with_one_line(args, capsys, monkeypatch, tmp_path) -> None:
    def refused(self, method, path, **kwargs):  # type: ignore[no-untyped-def]
        raise c.CliError("cannot reach the srbench API: connection refused")

    monkeypatch.setattr(c.ApiClient, "request", refused)
    code, err = run(args, capsys, tmp_path)
    assert code == c.EXIT_FAILED == 2, err
    lines = err.strip().splitlines()
    # `prepare --benchmark all` goes on with the other benchmarks: one line for each.
    assert len(lines) == (9 if "all" in args else 1), err
    assert all(line.startswith("error: ") for line in lines), err
