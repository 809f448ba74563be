"""The layers of docs/architecture.md, checked on the source (issue 24).

Every project module is parsed (never imported) and each import — at module level or inside a
function — becomes an edge of the import graph. The test fails when an edge runs from a lower
layer to a higher one, when two apps of one layer import each other, when the standalone
simulator imports anything of the project but its pure helpers, when any circle exists (a
function-level import no longer hides one), and when a module or a function outgrows the sizes
the issue set. The layer map below is the one the architecture page draws; change both together.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("srbench", "datasets", "runs", "compare", "recipes")

# Bottom to top. A module may import its own layer (same app) and any layer below.
KERNEL, SIMULATOR, DATASETS, RUNS, APPS, TOP = range(6)
LAYER_NAMES = ("kernel", "simulator", "datasets", "runs", "compare/recipes", "top")
TOP_MODULES = (
    "srbench.cli",
    "srbench.demo",
    "srbench.urls",
    "srbench.management",
    "srbench.api_docs",
    "srbench.templatetags",
    "srbench.wsgi",
    "srbench.asgi",
    "srbench.settings",
    "srbench.settings_test",
)
# What the simulator may take from the kernel: pure functions with no Django behind them.
SIMULATOR_MAY_IMPORT = ("srbench.canonical",)
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer(module: str) -> int:
    if _within(module, "srbench.simulator"):
        return SIMULATOR
    if any(_within(module, top) for top in TOP_MODULES):
        return TOP
    return {"srbench": KERNEL, "datasets": DATASETS, "runs": RUNS}.get(module.split(".")[0], APPS)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                modules[_module_name(path)] = path
    return modules


def _imported_names(module: str, path: Path, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module → the project modules it imports anywhere in its body."""

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                return candidate
        return None

    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported_names(module, path, node):
                target = resolve(name)
                # A package's own __init__ imported by its children is not an edge of note.
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def forbidden_edges(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for source, targets in graph.items():
        for target in targets:
            low, high = layer(source), layer(target)
            why = ""
            if high > low:
                why = f"{LAYER_NAMES[low]} imports {LAYER_NAMES[high]}"
            elif low == high == APPS and source.split(".")[0] != target.split(".")[0]:
                why = "compare and recipes stand side by side"
            elif low == SIMULATOR and high == KERNEL and target not in SIMULATOR_MAY_IMPORT:
                why = "the simulator stands alone"
            if why:
                found.append(f"{source} -> {target} ({why})")
    return sorted(found)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_checker_sees_an_upward_import_and_a_circle() -> None:
    """The checks below could fail: a hand-made graph with one of each is caught."""
    graph = {
        "runs.reporting.report": {"compare.stats"},
        "runs.a": {"runs.b"},
        "runs.b": {"runs.a"},
        "srbench.simulator.oracle": {"datasets.benchmarks", "srbench.canonical"},
    }
    assert forbidden_edges(graph) == [
        "runs.reporting.report -> compare.stats (runs imports compare/recipes)",
        "srbench.simulator.oracle -> datasets.benchmarks (simulator imports datasets)",
    ]
    assert circles(graph) == [["runs.a", "runs.b"]]


# What issue 24 has not yet removed, named one by one. The checks compare with these lists
# exactly: a new upward import or a new oversized unit fails, and so does a fixed one that is
# still listed — the list only shrinks. Each entry is open work in issue 24.
NOT_YET_MOVED: set[str] = set()
NOT_YET_SPLIT: set[str] = set()


def test_no_import_runs_up_the_layers() -> None:
    assert set(forbidden_edges(import_graph(project_modules()))) == NOT_YET_MOVED


def test_no_circle_even_through_function_level_imports() -> None:
    assert circles(import_graph(project_modules())) == []


def test_modules_and_functions_stay_small() -> None:
    too_big = set()
    for module, path in sorted(project_modules().items()):
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_big.add(module)
        for node in ast.walk(ast.parse(source)):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                too_big.add(f"{module}.{node.name}")
    assert too_big == NOT_YET_SPLIT


# Inside `runs` (issue 36 item 1): the engine drives calls at the bottom of the app and reaches
# the rest of `runs` only for the ledger, its rules and the adapters below it. The report and the
# live results are reached through hooks it is given (`runs.ledger.hooks`: report keeper, live-snapshot
# keeper, run-end hooks). `runs.planning.services` is the one exception left, named: the recovery pass
# rings the drive task's doorbell through `services.run_dispatch`, which tests replace.
ENGINE_MAY_IMPORT = (
    "runs.engine",
    "runs.models",
    "runs.ledger.events",
    "runs.ledger.hooks",
    "runs.ledger.accounting",
    "runs.ledger.usage",
    "runs.ledger.selectors",
    "runs.engine.router_client",
)
ENGINE_NOT_YET: set[str] = {"runs.engine.reaper -> runs.planning.services"}


def engine_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every edge from the engine to a part of `runs` it may not import."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        if _within(source, "runs.engine")
        for target in targets
        if (_within(target, "runs") or target == "runs")
        and not any(_within(target, allowed) for allowed in ENGINE_MAY_IMPORT)
    )


def test_the_engine_check_sees_an_import_of_the_report() -> None:
    graph = {
        "runs.engine.finish": {"runs.reporting.report", "runs.models"},
        "runs.reporting.report": {"runs.engine"},
    }
    assert engine_edges(graph) == ["runs.engine.finish -> runs.reporting.report"]


def test_the_engine_reaches_up_only_through_the_hooks_it_is_given() -> None:
    assert set(engine_edges(import_graph(project_modules()))) == ENGINE_NOT_YET
