"""A SciCode test snippet split in two: what runs beside the model's code, and what the judge runs.

Upstream runs each snippet after the model's code, in its module, with `target` (the step's
hidden value from test_data.h5) a global of that module: whatever the model's code does can read
it, or patch the comparison. Here the snippet is split by its syntax tree, statement by
statement:

- **The judge's statements** (run with `target`, in a process without model code): every
  `assert`, every assignment that reads `target` or a name bound from it (`a, b = target`), and
  every assignment that needs nothing of the model's process (`energy_ref = -4.73`,
  `tol = 1e-6`: a test's own reference values stay hidden too, unless a statement the model's
  process runs needs them — then they run in both).
- **Values**: inside a judge's statement, each largest sub-expression that reads nothing the
  judge holds and is not a comparison, an operator, a literal or a call of numpy / a builtin /
  a comparison helper — `time_of_flight(v0, theta, g)`, `Z`, `block.length` — is evaluated in
  the model's process, at that statement's place, and carried out as data
  (`runs.engine.scicode_values`). The judge evaluates the rest on those values: the comparisons
  themselves never run beside the model's code.
- **The model's statements**: everything else (the test's inputs, its own functions, calls of
  the model's functions whose results are then used by name), in order.

A snippet whose `target` reaches something the split cannot carry (a call of a test-defined or
model function with the target as argument, `target` inside a loop) is `UnsupportedTest`: the
step is never passed, rather than run with the target beside the model's code. None of the
official test split's 915 snippets is (tests/runs/test_scicode_split.py).
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass

LEAF = "_srbench_leaf"
RECORD = "_srbench_record"
TARGET = "target"
# Calls the judge may evaluate itself on carried values (the callee is the judge's own).
ALLOWED_BUILTINS = frozenset(
    {"abs", "all", "any", "bool", "complex", "float", "int", "len", "list", "max", "min"}
    | {"round", "sorted", "str", "sum", "tuple", "set", "dict", "isinstance"}
)
HELPERS = frozenset({"cmp_tuple_or_list", "are_dicts_close"})
NUMPY_NAMES = frozenset({"np", "numpy"})
HELPER_MODULE = "scicode.compare.cmp"
_STRUCTURE = (
    ast.Compare,
    ast.BoolOp,
    ast.UnaryOp,
    ast.BinOp,
    ast.Tuple,
    ast.List,
    ast.IfExp,
    ast.Starred,
)
_ON_TARGET = (*_STRUCTURE, ast.Attribute, ast.Subscript, ast.Slice)


class UnsupportedTest(ValueError):
    """The snippet cannot be split without giving its target to the model's process."""


class _NeedInModelProcess(Exception):
    """A statement the model's process runs reads names only the judge held: run their
    assignments in both processes and split again."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(sorted(names))
        self.names = names


@dataclass(frozen=True)
class JudgeStatement:
    source: str  # reads the carried values as `_srbench_leaf[i]`
    values: int  # how many values it reads


@dataclass(frozen=True)
class SplitTest:
    model_source: str  # runs after the model's code; calls `_srbench_record(test, statement, …)`
    judge: tuple[JudgeStatement, ...]


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(stmt: ast.stmt) -> set[str]:
    names = {
        n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _snippet_rebinds(tree: ast.Module) -> set[str]:
    """Names the snippet binds itself; importing the comparison helpers binds nothing new."""
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == HELPER_MODULE:
            continue
        names |= _stores(stmt)
    return names


_SCOPES = (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.NamedExpr)


@dataclass
class _Names:
    """Where each name of the snippet lives, statement by statement."""

    judge: set[str]  # the judge can evaluate it itself
    lacking: set[str]  # the model's process does not have it
    secret: set[str]  # bound from the target

    def bind(self, stores: set[str], *, judge: bool, model: bool, secret: bool) -> None:
        self.judge = self.judge | stores if judge else self.judge - stores
        self.lacking = self.lacking - stores if model else self.lacking | stores
        self.secret = self.secret | stores if secret else self.secret - stores


class _Expressions:
    """Splits one expression: returns the judge's form, collecting the carried values."""

    def __init__(self, names: _Names, allowed: frozenset[str]) -> None:
        self.names = names
        self.allowed = allowed
        self.values: list[ast.expr] = []

    def allowed_call(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.allowed
        parts: list[str] = []
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        return (
            isinstance(func, ast.Name)
            and func.id in NUMPY_NAMES
            and func.id in self.allowed
            and "random" not in parts
        )

    def cannot(self, names: set[str]) -> Exception:
        if names & self.names.secret:
            found = sorted(names & self.names.secret)
            return UnsupportedTest(f"the target reaches code the judge cannot run ({found})")
        return _NeedInModelProcess(names)

    def split(self, node: ast.expr) -> ast.expr:  # noqa: PLR0911 - one case a node kind
        lacking = _loads(node) & self.names.lacking
        if isinstance(node, ast.Name) and node.id in self.names.judge:
            return node
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, _STRUCTURE):
            return self._children(node)
        if isinstance(node, ast.Call):
            if lacking and _loads(node.func) & self.names.lacking:
                node.func = self.split(node.func)
                return self._call_arguments(node)
            if self.allowed_call(node.func) and self._simple(node):
                return self._call_arguments(node)
        elif lacking and isinstance(node, _ON_TARGET):
            return self._children(node)
        if lacking:
            raise self.cannot(lacking)
        self.values.append(node)
        return ast.Subscript(
            value=ast.Name(id=LEAF, ctx=ast.Load()),
            slice=ast.Constant(value=len(self.values) - 1),
            ctx=ast.Load(),
        )

    @staticmethod
    def _simple(node: ast.Call) -> bool:
        plain = all(not isinstance(a, ast.Starred) for a in node.args)
        plain = plain and all(k.arg is not None for k in node.keywords)
        # A generator or a lambda is no value to carry: the call is one value then.
        direct = [*node.args, *(k.value for k in node.keywords)]
        return plain and not any(isinstance(a, _SCOPES) for a in direct)

    def _call_arguments(self, node: ast.Call) -> ast.Call:
        node.args = [self.split(a) for a in node.args]
        for keyword in node.keywords:
            keyword.value = self.split(keyword.value)
        return node

    def _children(self, node: ast.expr) -> ast.expr:
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, name, self.split(value))
            elif isinstance(value, list):
                setattr(
                    node, name, [self.split(v) if isinstance(v, ast.expr) else v for v in value]
                )
        return node


def _plain_targets(stmt: ast.stmt) -> bool:
    def plain(t: ast.expr) -> bool:
        if isinstance(t, ast.Name):
            return True
        return isinstance(t, (ast.Tuple, ast.List)) and all(plain(e) for e in t.elts)

    return isinstance(stmt, ast.Assign) and all(plain(t) for t in stmt.targets)


def _needs_model(stmt: ast.stmt, names: _Names, allowed: frozenset[str]) -> bool:
    """Whether an assignment reads anything of the model's process (a trial split)."""
    assert isinstance(stmt, ast.Assign)
    trial = _Expressions(names, allowed)
    trial.split(copy.deepcopy(stmt.value))
    return bool(trial.values)


class _Attempt:
    def __init__(self, test: int, both: set[int], allowed: frozenset[str]) -> None:
        self.test, self.both = test, both
        self.base = allowed
        self.functions: set[str] = set()  # the test's own functions the judge may call
        self.names = _Names(judge={TARGET}, lacking={TARGET}, secret={TARGET})
        self.judge: list[JudgeStatement] = []
        self.model: list[str] = []

    def run(self, tree: ast.Module) -> SplitTest:
        for index, stmt in enumerate(tree.body):
            self.statement(index, stmt)
        return SplitTest(model_source="\n".join(self.model), judge=tuple(self.judge))

    @property
    def allowed(self) -> frozenset[str]:
        return self.base | self.functions

    def judge_function(self, stmt: ast.stmt) -> bool:
        """A function the test defines that reads nothing but numpy, builtins and the judge's
        other functions (say an order-free comparison): the judge may call it on the target."""
        if not isinstance(stmt, ast.FunctionDef) or stmt.decorator_list:
            return False
        if any(isinstance(n, ast.Attribute) and n.attr == "random" for n in ast.walk(stmt)):
            return False  # its draws belong to the model's process, in order
        params = {a.arg for a in ast.walk(stmt.args) if isinstance(a, ast.arg)}
        free = _loads(stmt) - params - (_stores(stmt) - {stmt.name}) - {stmt.name}
        builtin = set(dir(builtins)) - (ALLOWED_BUILTINS - self.base)
        return free <= (self.allowed & NUMPY_NAMES) | builtin | self.functions

    def statement(self, index: int, stmt: ast.stmt) -> None:
        loads, stores = _loads(stmt), _stores(stmt)
        self.functions -= stores
        if not loads & self.names.lacking and self.judge_function(stmt):
            assert isinstance(stmt, ast.FunctionDef)
            source = ast.unparse(stmt)
            self.model.append(source)
            self.judge.append(JudgeStatement(source, 0))
            self.functions.add(stmt.name)
            self.names.bind(stores, judge=True, model=True, secret=False)
            return
        names = self.names
        lacking = loads & names.lacking
        if index in self.both and lacking:  # its inputs must reach the model's process first
            raise _Expressions(names, self.allowed).cannot(lacking)
        if isinstance(stmt, ast.Assert) or (isinstance(stmt, ast.Assign) and lacking):
            if not (isinstance(stmt, ast.Assert) or _plain_targets(stmt)):
                raise _Expressions(names, self.allowed).cannot(lacking)
            self.for_judge(stmt)
            secret = bool(loads & names.secret)
            if isinstance(stmt, ast.Assign):
                names.bind(stores, judge=True, model=False, secret=secret)
            return
        if lacking:
            raise _Expressions(names, self.allowed).cannot(lacking)
        # What the model's process reads it may change (an array filled in place): from here on
        # the judge reads the model's copy of it, as upstream's one process would.
        names.judge -= loads
        self.model.append(ast.unparse(stmt))
        if _plain_targets(stmt) and not _needs_model(stmt, names, self.allowed):
            # A test's own reference value: the judge computes it too, and reads its own copy.
            self.judge.append(JudgeStatement(ast.unparse(stmt), 0))
            if index not in self.both:
                self.model.pop()  # needed by nothing the model's process runs: the judge's alone
            names.bind(stores, judge=True, model=index in self.both, secret=False)
            return
        names.bind(stores, judge=False, model=True, secret=False)

    def for_judge(self, stmt: ast.Assert | ast.Assign) -> None:
        exprs = _Expressions(self.names, self.allowed)
        node: ast.stmt
        if isinstance(stmt, ast.Assert):
            node = ast.Assert(test=exprs.split(copy.deepcopy(stmt.test)), msg=None)
        else:
            node = ast.Assign(targets=stmt.targets, value=exprs.split(copy.deepcopy(stmt.value)))
        source = ast.unparse(ast.fix_missing_locations(node))
        self.judge.append(JudgeStatement(source, len(exprs.values)))
        if exprs.values:
            for value in exprs.values:
                self.names.judge -= _loads(value)
            thunks = "".join(f"lambda: {ast.unparse(v)}, " for v in exprs.values)
            self.model.append(f"{RECORD}({self.test}, {len(self.judge) - 1}, ({thunks}))")


def split_test(source: str, test: int) -> SplitTest:
    """Split test snippet number `test` (0-based) of a step. Raises UnsupportedTest."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise UnsupportedTest(f"the test does not parse: {exc}") from exc
    allowed = frozenset((ALLOWED_BUILTINS | HELPERS | NUMPY_NAMES) - _snippet_rebinds(tree))
    both: set[int] = set()
    while True:
        try:
            return _Attempt(test, both, allowed).run(tree)
        except _NeedInModelProcess as need:
            more = {
                i
                for i, stmt in enumerate(tree.body)
                if i not in both and isinstance(stmt, ast.Assign) and _stores(stmt) & need.names
            }
            if not more:
                raise UnsupportedTest(f"cannot place {sorted(need.names)}") from None
            both |= more
