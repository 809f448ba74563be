"""The ledger's states are named by their enums (issue 24, "status enums everywhere"): no filter,
update or comparison of a run's, cell's or call's status spells the value as a literal string,
so renaming a state is one edit in runs/models.py and a typo is an AttributeError, not a filter
that silently matches nothing. Raw SQL takes the values from the same enums (runs/engine/store.py).

Checked on the parsed source of the apps (not tests, not migrations): keyword arguments
``status=`` / ``status__in=`` / ``cell__status=``… and comparisons of ``….status`` or a name
``status`` against string literals that are ledger states.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("srbench", "datasets", "runs", "compare", "recipes")
LEDGER_STATES = {
    "queued",
    "running",
    "completed",
    "failed",
    "cancelled",
    "interrupted",
    "pending",
    "sent_unknown",
    "sent",
    "streaming",
}


def _literals(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [v for element in node.elts for v in _literals(element)]
    return []


def _is_status(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "status") or (
        isinstance(node, ast.Name) and node.id == "status"
    )


def literal_states(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        spelled: list[str] = []
        if isinstance(node, ast.keyword) and node.arg:
            field = node.arg.split("__")
            if "status" in field and field[-1] in ("status", "in", "exact"):
                spelled = _literals(node.value)
        elif isinstance(node, ast.Compare) and _is_status(node.left):
            spelled = [v for right in node.comparators for v in _literals(right)]
        found += [f"{name}:{node.lineno} {value!r}" for value in spelled if value in LEDGER_STATES]
    return found


def test_the_check_sees_literal_states() -> None:
    source = (
        "Cell.objects.filter(status='running', cell__status__in=['failed', 'ok'])\n"
        "if run.status == 'queued' or grade.status == 'ok': pass\n"
        "Cell.objects.filter(status=CellStatus.RUNNING)\n"
    )
    assert literal_states(source, "m.py") == [
        "m.py:1 'running'",
        "m.py:1 'failed'",
        "m.py:2 'queued'",
    ]


def test_no_ledger_state_is_spelled_as_a_literal() -> None:
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                found += literal_states(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []
