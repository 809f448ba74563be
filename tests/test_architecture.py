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
PACKAGES = ("srbench", "datasets", "runs", "compare", "recipes", "bench")

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
    "bench",
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
        if _within(module, "bench"):  # measuring scripts, not the product: layers only
            continue
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_big.add(module)
        for node in ast.walk(ast.parse(source)):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                too_big.add(f"{module}.{node.name}")
    assert too_big == NOT_YET_SPLIT


# Inside `runs` (issue 36 item 1): its sub-packages are layers of their own, bottom to top, named
# by what they own. A module may import its own sub-package and any below it, never one above.
# The engine sits low: it reaches the report and the live results only through the hooks it is
# given (`runs.ledger.hooks`: report keeper, live-snapshot keeper, run-end hooks), and rings the
# drive task by name (`runs.engine.doorbell`). The app's own Django and Celery modules (admin,
# apps, tasks, urls and the package itself) wire the layers together at the top.
RUNS_LAYERS = (
    "runs.vocabulary",  # plain-Python words the Django-free remote CLI shares (recovery modes)
    "runs.models",  # the ledger's rows and constraints
    "runs.ledger",  # its rules: events, corrections, idempotency, accounting, reads, access, hooks
    "runs.engine",  # drives calls: claims, transport, settlement of cells, sandboxes, τ episodes
    "runs.reporting",  # reports, live results, reconciliation of usage, exports
    "runs.preflight",  # a target's wire checked before a run
    "runs.planning",  # plans, run creation, what can run here
    "runs.settlement",  # recovery, regrade, re-judge and the lineage of child runs
    "runs.interfaces",  # API, pages, forms, CLI text, the public view of cells and calls
)
RUNS_TOP = ("runs.admin", "runs.apps", "runs.tasks", "runs.urls")


def runs_layer(module: str) -> int | None:
    """The inner layer of a `runs` module (len(RUNS_LAYERS) for the wiring on top)."""
    for rank, prefix in enumerate(RUNS_LAYERS):
        if _within(module, prefix):
            return rank
    if module == "runs" or any(_within(module, top) for top in RUNS_TOP):
        return len(RUNS_LAYERS)
    return None


def runs_inner_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs up between the inner layers of `runs`."""
    found = []
    for source, targets in graph.items():
        low = runs_layer(source)
        for target in targets:
            high = runs_layer(target)
            if low is not None and high is not None and high > low:
                found.append(f"{source} -> {target}")
    return sorted(found)


def test_every_runs_module_belongs_to_an_inner_layer() -> None:
    unplaced = [m for m in project_modules() if _within(m, "runs") and runs_layer(m) is None]
    assert unplaced == []


def test_the_inner_check_sees_the_engine_reaching_up() -> None:
    graph = {
        "runs.engine.finish": {"runs.reporting.report", "runs.models"},
        "runs.reporting.report": {"runs.engine.sse"},
        "runs.ledger.selectors": {"runs.interfaces.public"},
    }
    assert runs_inner_edges(graph) == [
        "runs.engine.finish -> runs.reporting.report",
        "runs.ledger.selectors -> runs.interfaces.public",
    ]


def test_no_import_runs_up_between_the_inner_layers_of_runs() -> None:
    assert runs_inner_edges(import_graph(project_modules())) == []


def test_bench_is_top_and_nothing_imports_it() -> None:
    """bench/ drives the product from outside: it may import anything, nothing imports it."""
    graph = import_graph(project_modules())
    into_bench = sorted(
        f"{s} -> {t}"
        for s, ts in graph.items()
        for t in ts
        if _within(t, "bench") and not _within(s, "bench")
    )
    assert into_bench == []
    assert any(_within(m, "bench") for m in graph), "bench/ is parsed"
