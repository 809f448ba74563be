"""Read by every Python a Terminal-Bench verifier starts in the sandbox, never by the project:
runs/engine/terminal.py mounts this directory read-only and names it in PYTHONPATH for the
task's test command only. It runs under any CPython 3.11+ the sandbox holds (the venv's and the
system's `/usr/bin/python3`), so it uses nothing newer.

`python3 -m pytest` puts its working directory first on sys.path, ahead of the standard library
and site-packages, and a verifier's working directory is `/app`, the agent's. A `pytest.py`,
`_pytest/`, `pluggy/`, `argparse.py` or `pytest.pyc` planted there replaced the verifier and
wrote its reward (docs/decisions.md, "A verifier's pytest the agent cannot replace"). For
`-m pytest` (and `-m py.test`) this takes the working directory off sys.path before pytest is
imported — as the `pytest` command and upstream's `uvx … pytest` have it — and adds a last
finder that still lets the tests' own imports reach a top-level module there, so a test that
says `from median import median` in `/app` keeps working. Every other Python keeps Python's own
rules: a program the tests run (`python3 median.py`) imports the modules beside it as always.

The `-m pytest` process is also confined before it imports pytest (srbench_confine, beside
this file): nothing it runs may write under `/logs`, where the test script writes the reward,
nor reach the test script or pytest itself by ptrace. (The `pytest` command does not run in the
sandbox at all: its first line names the virtualenv's host path.)
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec, PathFinder
from types import FrameType

TESTS_DIR = "/tests"
PYTEST_MODULES = ("pytest", "py.test")
_IMPORT_SYSTEM = os.path.join(os.path.dirname(os.__file__), "importlib")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def importer_file(frame: FrameType | None) -> str | None:
    """The file of the code that asked for an import: the first frame, from ``frame`` up, that
    is not the import system (importlib, frozen or not) nor pytest's ``importorskip``, which
    imports on its caller's behalf."""
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        inside = (
            name.startswith("<frozen importlib")
            or _within(name, _IMPORT_SYSTEM)
            or name == __file__
            or (code.co_name == "importorskip" and os.path.basename(name) == "outcomes.py")
        )
        if not inside:
            return name
        frame = frame.f_back
    return None


class TaskModules:
    """The last finder of a verifier's pytest: a top-level module in the working directory, for
    an import made by the tests (under /tests) or by that directory's own modules — never for
    one made by the standard library, pytest or another installed package, whose optional
    imports (`_wmi`, `msvcrt`) would otherwise reach a file the agent planted. Anything an
    earlier finder has (the standard library, site-packages, /tests) is never looked up here."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if path is not None or "." in name:
            return None  # a submodule: its package's own path finds it
        importer = importer_file(sys._getframe(1))
        if importer is None or not (_within(importer, TESTS_DIR) or _within(importer, self.root)):
            return None
        return PathFinder.find_spec(name, [self.root])


def guard_pytest_main() -> None:
    """Wrap runpy's entry for `-m`: the interpreter inserts the working directory into sys.path
    after this file ran and before it calls runpy, so only there can it come off again."""
    import runpy

    run_module_as_main = runpy._run_module_as_main  # type: ignore[attr-defined]

    def guarded(mod_name: str, alter_argv: bool = True) -> object:
        if mod_name in PYTEST_MODULES:
            cwd = os.getcwd()
            if sys.path and sys.path[0] == cwd:
                del sys.path[0]
                sys.meta_path.append(TaskModules(cwd))
            confine_pytest()
        return run_module_as_main(mod_name, alter_argv)

    runpy._run_module_as_main = guarded  # type: ignore[attr-defined]


def confine_pytest() -> None:
    """srbench_confine.confine, imported from this directory whatever sys.path holds by now. A
    kernel without Landlock leaves the process as it was; a refusal ends it with status 1 (the
    tests then fail: pytest never runs unconfined where confinement was possible)."""
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location(
        "srbench_confine", os.path.join(os.path.dirname(__file__), "srbench_confine.py")
    )
    assert spec is not None and spec.loader is not None
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.confine()
    except OSError as error:
        sys.stderr.write(f"srbench verifier: cannot confine pytest: {error}\n")
        os._exit(1)


guard_pytest_main()
