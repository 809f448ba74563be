"""One home per name (issue 24, "one home for every rule"): a name is imported from the module
that defines it, never through a module that merely imported it. A re-export keeps a second
address alive after a move, and the next reader cannot tell which one is the rule's home.

Every module of the project and of its tests and benches is parsed (never imported). The one
exception is ``runs.models``: Django finds a model through its app's ``models`` module, so the
models that live in sibling files (``runs.models.regrade``) are imported there on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("srbench", "datasets", "runs", "compare", "recipes", "tests", "bench")
PROJECT = ("srbench", "datasets", "runs", "compare", "recipes")
# Modules whose imported names are meant to be read through them.
GATHERING = {"runs.models"}


def modules() -> dict[str, Path]:
    found = {}
    for package in SCANNED:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_from_project(path: Path) -> dict[str, str]:
    """Top-level names a module binds by importing them from another project module."""
    names = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module
            and node.module.split(".")[0] in PROJECT
        ):
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def reexported_uses(found: dict[str, Path]) -> list[str]:
    bound = {name: imported_from_project(path) for name, path in found.items()}
    uses = []
    for module, path in found.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in found:
                continue
            source = node.module
            if source in GATHERING or found[source].name == "__init__.py":
                continue
            for alias in node.names:
                home = bound[source].get(alias.name)
                if home is not None:
                    uses.append(f"{module}: {alias.name} through {source} (its home is {home})")
    return sorted(uses)


def test_the_check_sees_a_reexport(tmp_path: Path) -> None:
    """The check below could fail: a hand-made pair of modules with a re-export is caught."""
    home = tmp_path / "home.py"
    home.write_text("from runs.ledger.usage import usage_buckets\n")
    user = tmp_path / "user.py"
    user.write_text("from runs.home import usage_buckets\n")
    found = {"runs.home": home, "runs.user": user}
    assert reexported_uses(found) == [
        "runs.user: usage_buckets through runs.home (its home is runs.ledger.usage)"
    ]


def test_every_name_is_imported_from_its_home() -> None:
    assert reexported_uses(modules()) == []
