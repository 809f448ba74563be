"""The ledger's states are named by their enums (issue 24, "status enums everywhere"): no filter,
update or comparison of a run's, cell's or call's status spells the value as a literal string,
so renaming a state is one edit in runs/models.py and a typo is an AttributeError, not a filter
that silently matches nothing. Raw SQL takes the values from the same enums (runs/engine/store.py).

Checked on the parsed source of the apps (not tests, not migrations): keyword arguments
``status=`` / ``status__in=`` / ``cell__status=``… (constructor arguments included), comparisons
of ``….status`` or a name ``status`` against string literals that are ledger states, assignments
to ``….status`` or to a name that says it holds states (``OPEN_CALL_STATUSES = ("sent", …)``:
issue 36 item 3 found a second such tuple the check could not see), and ``"status": "…"`` in a
dict literal.
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


def _holds_states(target: ast.AST) -> bool:
    """``x.status`` or a name such as ``status``, ``OPEN_CALL_STATUSES``, ``done_statuses``."""
    if isinstance(target, ast.Attribute):
        return target.attr == "status"
    return isinstance(target, ast.Name) and "status" in target.id.lower()


def _spelled(node: ast.AST) -> list[str]:
    """The string literals a node spells where a ledger state is meant (module docstring)."""
    if isinstance(node, ast.keyword) and node.arg:
        field = node.arg.split("__")
        if "status" in field and field[-1] in ("status", "in", "exact"):
            return _literals(node.value)
    elif isinstance(node, ast.Compare) and _is_status(node.left):
        return [v for right in node.comparators for v in _literals(right)]
    elif isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is not None and any(_holds_states(t) for t in targets):
            return _literals(node.value)
    elif isinstance(node, ast.Dict):
        return [
            v
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and key.value == "status"
            for v in _literals(value)
        ]
    return []


def literal_states(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        spelled = _spelled(node)
        found += [f"{name}:{node.lineno} {value!r}" for value in spelled if value in LEDGER_STATES]
    return found


def test_the_check_sees_literal_states() -> None:
    source = (
        "Cell.objects.filter(status='running', cell__status__in=['failed', 'ok'])\n"
        "if run.status == 'queued' or grade.status == 'ok': pass\n"
        "Cell.objects.filter(status=CellStatus.RUNNING)\n"
        "OPEN_CALL_STATUSES = ('sent', 'streaming')\n"
        "cell.status = 'completed'\n"
        "Cell(run=run, status='pending')\n"
        "doc = {'status': 'cancelled', 'kind': 'running'}\n"
        "OPEN = (CallStatus.SENT,)\n"
    )
    assert sorted(literal_states(source, "m.py")) == [
        "m.py:1 'failed'",
        "m.py:1 'running'",
        "m.py:2 'queued'",
        "m.py:4 'sent'",
        "m.py:4 'streaming'",
        "m.py:5 'completed'",
        "m.py:6 'pending'",
        "m.py:7 'cancelled'",
    ]


def test_no_ledger_state_is_spelled_as_a_literal() -> None:
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                found += literal_states(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []
