"""The simulator stands alone: it must run where Django and the database are not set up."""

from __future__ import annotations

import ast
from pathlib import Path

import srbench.simulator

ALLOWED_SRBENCH_IMPORTS = {"srbench.canonical"}


def test_simulator_modules_import_neither_django_nor_the_rest_of_srbench():
    offenders = []
    for path in Path(srbench.simulator.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                if root in {"django", "rest_framework", "celery", "psycopg"} or (
                    root == "srbench"
                    and not name.startswith("srbench.simulator")
                    and name not in ALLOWED_SRBENCH_IMPORTS
                ):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []
