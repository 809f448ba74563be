"""Run-start hooks and run-page tabs that apps above `runs` register (issue 24): `runs` calls
them without importing those apps."""

from __future__ import annotations

from typing import Any

import pytest

from recipes.services import run_recipes_capture
from runs.ledger import hooks


def test_recipes_registers_its_capture_and_its_tab_once() -> None:
    assert hooks.run_start_hooks.count(run_recipes_capture) == 1
    assert "recipe" in hooks.run_tab_providers


def test_run_start_calls_every_hook_in_order_and_registering_twice_is_a_no_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hooks, "run_start_hooks", [])
    seen: list[tuple[str, int]] = []

    def first(*, run_id: int) -> None:
        seen.append(("first", run_id))

    def second(*, run_id: int) -> None:
        seen.append(("second", run_id))

    for hook in (first, second, first):
        hooks.register_run_start_hook(hook)
    hooks.run_start(run_id=7)
    assert seen == [("first", 7), ("second", 7)]


def test_a_tab_nobody_provides_has_an_empty_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "run_tab_providers", {})
    assert hooks.run_tab_context("recipe", None, None) == {}
    hooks.register_run_tab("recipe", lambda request, run: {"run": run})
    got: dict[str, Any] = hooks.run_tab_context("recipe", None, 3)
    assert got == {"run": 3}
