"""The guard of a Terminal-Bench verifier's pytest, read by every Python a verifier starts in the
sandbox, never by the project. runs/engine/terminal.py mounts this directory read-only and adds
`srbench-verifier.pth` (beside this file) to the site-packages of the sandbox's Python, which
runs it at every start whatever the test script sets (`PYTHONPATH`, `-E`, `-I`); it loads this
file by its path. It runs under any CPython 3.11+, so it uses nothing newer.

A test script starts pytest in the agent's directory `/app` in many ways — `python3 -m pytest`
(and `-m py.test`), `python3 -c "import pytest; …"`, a script that imports pytest, under a
`PYTHONPATH` of its own — and Python puts `/app` (or `''`) ahead of the standard library and
site-packages in all but the last. A `pytest.py`, `_pytest/`, `argparse.py` or `pytest.pyc`
planted there would replace the verifier (docs/decisions.md, "A verifier's pytest the agent
cannot replace" and "jb: the verifier's guard in the interpreter itself"). So the guard acts
where pytest is imported, not on the command line: a finder ahead of the path finder stays
idle until something asks for `pytest`, `_pytest` or `py`; from then on, in that process:

- every `sys.path` entry outside the read-only places (`''`, `/app`, a `PYTHONPATH` entry
  there) comes off, so no other finder (pytest's assertion rewriter imports a `-p` plugin by
  itself, ahead of this one) nor a plugin lookup finds anything there;
- a top-level module the read-only entries of `sys.path` provide (the standard library,
  site-packages, /tests), in their order, always comes from there, never from a place the
  agent can write before them;
- any other top-level module found outside the read-only places (those entries, or one a test
  adds) is only for the tests' own imports (code under `/tests`, the
  script given to `-c`) and for the agent's modules importing their neighbours, never for the
  standard library's, pytest's or another installed package's (their optional imports, `_wmi`
  and `msvcrt`, would otherwise reach a file the agent planted);
- no plugin is autoloaded (`PYTEST_DISABLE_PLUGIN_AUTOLOAD`, set here, not only by the
  verifier's environment);
- the process is confined before pytest is imported (srbench_confine, beside this file).

The test script's own Python that never imports pytest (`python3 -c "import json; …"`,
`python3 -m json.tool out.json`, a script in /tests) is guarded the same from its start (its
imports only; not confined, so it may still write the reward). Every Python a pytest process
starts (`python3 main.py`, run by the tests) and the agent's program run by the script itself
keep Python's own rules until they import pytest: their modules beside them, even one named
like the standard library's, are their own — they are the agent's code, confined with pytest.
"""

# Nothing is imported by name that the interpreter has not frozen or built in (os, sys,
# importlib.machinery): under a PYTHONPATH of the agent's directory, `types`, `typing` or even
# `__future__` would come from there.
import os
import sys
from importlib.machinery import ModuleSpec, PathFinder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

TESTS_DIR = "/tests"
PYTEST_NAMES = frozenset({"pytest", "_pytest", "py"})
# Set in a pytest process (and so in all it starts): the programs the tests run are the agent's,
# confined with pytest, and keep Python's own rules. Absent (or dropped by a test): guarded.
UNDER_PYTEST = "SRBENCH_VERIFIER_UNDER_PYTEST"
_HERE = os.path.dirname(os.path.abspath(__file__))
_IMPORT_SYSTEM = os.path.join(os.path.dirname(os.__file__), "importlib")
# The runtime's top-level links and binds (/bin -> usr/bin, /lib -> usr/lib): read-only.
_RUNTIME_TOP = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The read-only places whose modules need no guard: the runtime, the tests, this directory.
# Never "/" itself: a Python started as /bin/python3 has that prefix (the sandbox's pyvenv.cfg
# at the root refuses it a user site; runs/engine/sandbox_pythons.py). Read at each use, not
# when this file is loaded: the guard may be loaded by `encodings` (runs/engine/sandbox_pythons.py),
# before `site` sets a virtualenv's sys.prefix (the sandbox's own virtualenv, read-only; the
# sandbox refuses to start a Python from one the test script made in a writable place).
_FIXED = {"/usr", TESTS_DIR, _HERE, *_RUNTIME_TOP}


def _read_only_roots() -> tuple[str, ...]:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return tuple(sorted((prefixes | _FIXED) - {"/"}))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _read_only(path: str) -> bool:
    return any(_within(path, root) for root in _read_only_roots())


def read_only_entries() -> list[str]:
    """The entries of sys.path, in its order, in the read-only places: the standard library,
    site-packages, /tests (pytest puts it first) — never `''`, the working directory or an entry
    under /app or /tmp."""
    return [p for p in sys.path if os.path.isabs(p) and _read_only(p)]


def importer_frame(frame: "FrameType | None") -> "FrameType | None":
    """The frame of the code that asked for an import: the first, from ``frame`` up, that is not
    the import system (importlib, frozen or not), this file, nor pytest's ``importorskip``,
    which imports on its caller's behalf."""
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
            return frame
        frame = frame.f_back
    return None


def tests_own_import(frame: "FrameType | None", module: str, main: str | None) -> bool:
    """Whether the import was asked for by the tests (a file under /tests, the `-c` script, the
    module the command line names with `-m`) or by a module outside the read-only places (the
    agent's, already running)."""
    if frame is None:
        return False
    name = frame.f_code.co_filename
    if name == "<frozen runpy>":
        return module == main
    if name in ("<string>", "<stdin>"):
        return frame.f_back is None and frame.f_globals.get("__name__") == "__main__"
    if not os.path.isabs(name):
        return False
    return _within(name, TESTS_DIR) or not _read_only(name)


def _spec_paths(spec: ModuleSpec) -> list[str]:
    paths = [spec.origin] if spec.origin and os.path.isabs(spec.origin) else []
    return paths + list(spec.submodule_search_locations or [])


class PytestGuard:
    """The finder (just before the path finder) that keeps a pytest process's imports out of
    the places the agent can write; idle until pytest is asked for."""

    def __init__(self, watching: bool, main: str | None) -> None:
        self.agents: list[str] = []  # the entries taken off sys.path on activation
        self.active = False
        self.watching = watching  # guarding imports from the start (the test script's Python)
        self.main = main  # the top-level module named by `-m`

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if path is not None or "." in name:
            return None  # a submodule: its package's own path finds it
        if not self.active:
            if name in PYTEST_NAMES:
                self.activate()
            elif not self.watching:
                return None
        read_only = read_only_entries()
        spec = PathFinder.find_spec(name, read_only)
        if spec is not None:
            return spec
        others = [p for p in sys.path if p not in read_only]
        spec = PathFinder.find_spec(name, others + self.agents)
        if spec is None or all(_read_only(p) for p in _spec_paths(spec)):
            return spec
        if tests_own_import(importer_frame(sys._getframe(1)), name, self.main):
            return spec
        raise ModuleNotFoundError(f"No module named {name!r} (srbench verifier)", name=name)

    def activate(self) -> None:
        """Once per process, on the first request for pytest: every sys.path entry outside the
        read-only places (`''`, the working directory, a PYTHONPATH entry) comes off, so that no
        other finder — pytest's assertion rewriter, first of all, which imports a `-p` plugin by
        itself — and no plugin lookup reaches them; only this finder still looks there, for the
        tests' own imports. No plugin autoload; the process confined."""
        self.active = True
        os.environ[UNDER_PYTEST] = "1"
        self.agents = [p for p in sys.path if not (os.path.isabs(p) and _read_only(p))]
        sys.path[:] = [p for p in sys.path if p not in self.agents]
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        confine()


def confine() -> None:
    """srbench_confine.confine, loaded from this directory by its path. A kernel without
    Landlock leaves the process as it was; a refusal ends it with status 1 (the tests then
    fail: pytest never runs unconfined where confinement was possible)."""
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("srbench_confine", os.path.join(_HERE, "srbench_confine.py"))
    assert spec is not None and spec.loader is not None
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.confine()
    except OSError as error:
        sys.stderr.write(f"srbench verifier: cannot confine pytest: {error}\n")
        os._exit(1)


def main_module(argv: list[str]) -> str | None:
    """The top-level module a command line names with `-m` (`python3 -u -m json.tool x`)."""
    for index, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[index + 1].split(".")[0] if index + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:].split(".")[0]
        if arg == "-c" or not arg.startswith("-"):
            return None
    return None


def watching() -> bool:
    """Whether this Python guards its imports from the start: one the test script runs itself
    (not under pytest) whose main code is the task's — `-c`, `-m`, stdin, a script in a
    read-only place. A program of the agent's (`python3 /app/main.py`) keeps Python's rules until
    it imports pytest: guarding it would change nothing it cannot do itself."""
    if os.environ.get(UNDER_PYTEST) == "1":
        return False
    main = sys.argv[0] if sys.argv else ""
    return main in ("-c", "-m", "-", "") or _read_only(os.path.abspath(main))


def install() -> PytestGuard:
    """Put the guard just before the path finder (after the builtin and frozen importers, which
    nothing on sys.path can shadow, and before any finder a later `.pth` adds)."""
    guard = PytestGuard(watching(), main_module(list(sys.orig_argv)))
    position = next(
        (i for i, finder in enumerate(sys.meta_path) if finder is PathFinder), len(sys.meta_path)
    )
    sys.meta_path.insert(position, guard)
    return guard


if not any(isinstance(finder, PytestGuard) for finder in sys.meta_path):
    install()
