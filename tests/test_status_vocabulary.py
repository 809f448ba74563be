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

Issue 36 item 3 extends it to every assignment and constructor argument, and to the modes: a
run's mode (``Run.Mode``) and a recovery plan's (``RecoveryPlanMode``, which the stored
``RecoveryRequest.Mode`` holds whole since migration 0023). Also seen: a row's ``["status"]`` or
``["mode"]`` on either side of a comparison or as an assignment target, a literal on the left,
a parameter's default, ``.get("mode", "…")``, the branches of an ``if`` expression. The values
are read from the enums. Where a literal stays, KEPT says why. The modules the Django-free remote
CLI loads (srbench/cli/remote.py) compare the API's JSON words and cannot import the ledger's
enums (Django models) without booting Django: there only the recovery modes are checked, whose
enum (runs/vocabulary/recovery_modes.py) is plain Python.
"""

from __future__ import annotations

import ast
from enum import Enum
from pathlib import Path

from runs.models import CallStatus, CellStatus, RecoveryRequest, Run, RunStatus
from runs.vocabulary.recovery_modes import RecoveryPlanMode

ROOT = Path(__file__).resolve().parent.parent
APPS = ("srbench", "datasets", "runs", "compare", "recipes")


def _values(*enums: type[Enum]) -> frozenset[str]:
    return frozenset(str(member) for enum in enums for member in enum)


# Each field's vocabulary, read from its enums: a state or a mode renamed there is seen here.
VOCABULARIES: dict[str, frozenset[str]] = {
    "status": _values(RunStatus, CellStatus, CallStatus),
    "mode": _values(Run.Mode, RecoveryRequest.Mode, RecoveryPlanMode),
}
LEDGER_STATES = VOCABULARIES["status"]
DJANGO_FREE_MODES = _values(RecoveryPlanMode)


def _literals(node: ast.AST | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [v for element in node.elts for v in _literals(element)]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def _words(name: str) -> set[str]:
    return set(name.lower().split("_"))


def _holder(node: ast.AST, field: str) -> bool:
    """``x.status``, ``x["status"]``, or a name whose words say it holds the field's values
    (``status``, ``OPEN_CALL_STATUSES``, ``done_statuses``, ``mode``, ``MODES``; not ``model``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == field
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == field
    if isinstance(node, ast.Name):
        return bool(_words(node.id) & {field, f"{field}s", f"{field}es"})
    return False


def _keyword(node: ast.keyword, field: str) -> list[str]:
    """``status=``, ``status__in=``, ``cell__status=``, ``mode=`` (filters, updates and every
    constructor: ``Cell(status=…)``, ``RecoveryRequest(mode=…)``, ``Q(mode__in=…)``)."""
    parts = (node.arg or "").split("__")
    if field in parts and parts[-1] in (field, "in", "exact"):
        return _literals(node.value)
    return []


def _spelled(node: ast.AST, field: str) -> list[str]:
    """The string literals a node spells where a value of ``field`` is meant (module docstring)."""
    if isinstance(node, ast.keyword):
        return _keyword(node, field)
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(_holder(side, field) for side in sides):
            return [v for side in sides if not _holder(side, field) for v in _literals(side)]
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is not None and any(_holder(t, field) for t in targets):
            return _literals(node.value)
    elif isinstance(node, ast.Dict):
        return [
            v
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and key.value == field
            for v in _literals(value)
        ]
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return _defaults(node.args, field)
    elif isinstance(node, ast.Call) and _is_get_of(node, field):
        return _literals(node.args[1])
    return []


def _is_get_of(node: ast.Call, field: str) -> bool:
    """``row.get("mode", "undispatched")``: the default is a value of the field."""
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == field
    )


def _defaults(args: ast.arguments, field: str) -> list[str]:
    """A parameter's default: ``def plan(run, mode="undispatched")``."""
    positional = args.posonlyargs + args.args
    pairs = list(
        zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
    )
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
    return [v for arg, d in pairs if _holder(ast.Name(arg.arg), field) for v in _literals(d)]


def literal_states(source: str, name: str, *, django_free: bool = False) -> list[str]:
    """``file:line 'value'`` for each literal; in a module that must stay Django-free, only the
    recovery modes (their enum is importable there)."""
    vocabularies = {"mode": DJANGO_FREE_MODES} if django_free else VOCABULARIES
    found = []
    for node in ast.walk(ast.parse(source, name)):
        for field, vocabulary in vocabularies.items():
            spelled = _spelled(node, field)
            found += [f"{name}:{node.lineno} {v!r}" for v in spelled if v in vocabulary]
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


def test_the_check_sees_every_assignment_and_argument() -> None:
    """Issue 36 item 3: the spellings the first check missed — a mode anywhere, a row's
    ``["status"]``, a literal on the left, a ``.update``, a parameter's default, an ``if``
    expression — are seen; names that merely look alike (``model``, ``mode="w"``) are not."""
    source = (
        "RecoveryRequest.objects.create(parent=run, mode='judge_only')\n"
        "Run.objects.filter(pk=1).update(status='failed', mode='preview')\n"
        "if row['status'] == 'sent_unknown' or 'live' == run.mode: pass\n"
        "row['mode'] = 'undispatched'\n"
        "MODES = ('undispatched', 'failed', 'judge_only')\n"
        "def plan(run, mode='failed', *, status='queued'): pass\n"
        "payload = {'mode': 'live' if live else 'preview'}\n"
        "RecoveryRequest(mode=RecoveryRequest.Mode.FAILED, child=None)\n"
        "model = 'live'; tarfile.open(f, mode='w'); data.model_dump(mode='json')\n"
        "mode = source.get('mode', 'undispatched')\n"
    )
    assert sorted(literal_states(source, "m.py")) == [
        "m.py:1 'judge_only'",
        "m.py:10 'undispatched'",
        "m.py:2 'failed'",
        "m.py:2 'preview'",
        "m.py:3 'live'",
        "m.py:3 'sent_unknown'",
        "m.py:4 'undispatched'",
        "m.py:5 'failed'",
        "m.py:5 'judge_only'",
        "m.py:5 'undispatched'",
        "m.py:6 'failed'",
        "m.py:6 'queued'",
        "m.py:7 'live'",
        "m.py:7 'preview'",
    ]


def test_the_vocabularies_come_from_the_enums() -> None:
    assert "judge_only" in VOCABULARIES["mode"] and "sent_unknown" in VOCABULARIES["status"]
    assert {str(m) for m in RecoveryRequest.Mode} == {str(m) for m in RecoveryPlanMode}


# Literals that stay, by file and value, and why. Each must still be found (the list only
# shrinks): a replaced one fails test_each_kept_literal_is_still_there until it is removed here.
KEPT = {
    # A SciCode grade's own verdict ("passed" / "failed"), not a ledger state.
    ("runs/engine/code_grading.py", "failed"),
}


def _module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def remote_client_files() -> set[str]:
    """The project modules the Django-free remote CLI loads: its verb modules and, transitively,
    what they import (tests/cli/test_console_remote.py proves none of them boots Django)."""
    from srbench.cli.remote import HTTP_VERB_MODULES

    seen: set[str] = set()
    todo = list(HTTP_VERB_MODULES)
    while todo:
        path = _module_path(todo.pop())
        if path is None or str(path.relative_to(ROOT)) in seen:
            continue
        seen.add(str(path.relative_to(ROOT)))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
    return seen


def _found() -> list[str]:
    clients = remote_client_files()
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if "migrations" not in path.parts:
                found += literal_states(path.read_text(), name, django_free=name in clients)
    return found


def _key(finding: str) -> tuple[str, str]:
    place, _, value = finding.partition(" ")
    return place.rpartition(":")[0], value.strip("'")


def test_no_ledger_state_or_mode_is_spelled_as_a_literal() -> None:
    assert [f for f in _found() if _key(f) not in KEPT] == []


def test_each_kept_literal_is_still_there() -> None:
    assert KEPT - {_key(f) for f in _found()} == set()


def test_a_django_free_module_is_checked_for_recovery_modes() -> None:
    source = "if plan['mode'] == 'judge_only' and run['status'] == 'completed': pass\n"
    assert literal_states(source, "cli.py", django_free=True) == ["cli.py:1 'judge_only'"]


def test_the_remote_clients_are_the_api_clients_only() -> None:
    clients = remote_client_files()
    assert {
        "runs/interfaces/cli.py",
        "runs/interfaces/recovery_cli.py",
        "compare/cli.py",
        "runs/interfaces/rejudge_cli.py",
    } <= clients
    assert (
        not {"runs/models/__init__.py", "runs/settlement/recovery.py", "runs/interfaces/views.py"}
        & clients
    )
