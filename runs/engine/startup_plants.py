"""Modules an agent may not leave where a Terminal-Bench test script's Python would import them
at start-up (docs/decisions.md, "the verifier's start-up modules").

A test script that puts the agent's directory on `PYTHONPATH` (Harbor's `export
PYTHONPATH=/app`) makes every Python it starts look there first, and some imports happen
before anything of ours can act: `encodings` while the interpreter starts, then what `site`
imports — `sitecustomize`, `usercustomize` and the modules the runtime's `.pth` files import
(`re`, `pathlib`, an editable install's finder). A planted `/app/encodings/__init__.py` ending in
`os._exit(0)` made every Python of the test script "pass" (tried by hand). Nothing inside the
interpreter can refuse it, so the verifier looks before the test script runs: a session whose
directory holds a module or package of one of these names, where a path root could be, is not
verified — reward 0, reason `startup_module_planted`, the paths named.

Where a path root could be: the agent's directory itself and every directory under it that is
not inside a package (a directory with an `__init__` file is a package: a module inside it is
imported only by its dotted name, so `mylib/types.py` is never a start-up module). A directory
without an `__init__` cannot shadow a regular package of the standard library (Python prefers a
regular package found anywhere on the path to a namespace portion), so only a package's
`__init__` or a module file counts. Symlinks are not followed; a symlink of a start-up name
counts as planted.
"""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath

# Top-level names of the modules the sandbox's Pythons import from the path at start-up, before
# a test script's code runs (not frozen, not built in); tests/security/test_startup_plants.py
# checks the list against what the sandbox's own Pythons import.
STARTUP_MODULES = frozenset(
    {
        "__future__",
        "_distutils_hack",
        "collections",
        "copyreg",
        "encodings",
        "enum",
        "fnmatch",
        "functools",
        "importlib",
        "ipaddress",
        "keyword",
        "math",
        "operator",
        "pathlib",
        "re",
        "reprlib",
        "sitecustomize",
        "types",
        "urllib",
        "usercustomize",
        "warnings",
    }
)
EDITABLE_PREFIX = "__editable__"  # an editable install's finder: `__editable___<name>_finder`
MODULE_SUFFIXES = (".py", ".pyc", ".so")
STARTUP_MODULE_PLANTED = "startup_module_planted"
MAX_DEPTH = 6
MAX_ENTRIES = 20_000


def _startup_name(name: str) -> str | None:
    """The module a directory entry would provide, if it is a start-up module's."""
    stem = name
    for suffix in MODULE_SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)].split(".", 1)[0]  # `math.cpython-312-….so` → math
            break
    if stem in STARTUP_MODULES or stem.startswith(EDITABLE_PREFIX):
        return stem
    return None


def startup_plants(snapshot: Path) -> list[str]:
    """Paths (relative to `/app`) of start-up modules planted where a path root could be: a
    module file, a package (a directory with an `__init__`) or a symlink of such a name. Read
    from the session's snapshot archive (`/app` as the sandbox archived it): only its headers,
    nothing unpacked, nothing followed."""
    entries: dict[tuple[str, ...], str] = {}  # path parts -> "dir", "link" or "file"
    packages: set[tuple[str, ...]] = set()
    with tarfile.open(snapshot, "r:") as archive:
        for count, member in enumerate(archive):
            if count >= MAX_ENTRIES:
                break
            parts = tuple(p for p in PurePosixPath(member.name).parts if p not in (".", ""))
            if not parts or ".." in parts:
                continue
            kind = (
                "link" if member.issym() or member.islnk() else "dir" if member.isdir() else "file"
            )
            entries[parts] = kind
            if parts[-1].startswith("__init__.") and kind != "dir":
                packages.add(parts[:-1])
    found = []
    for parts, kind in entries.items():
        # A path root is `/app` or a directory under it outside any package.
        if len(parts) > MAX_DEPTH + 1 or any(parts[:i] in packages for i in range(1, len(parts))):
            continue
        name = parts[-1]
        module = _startup_name(name)
        if module is None:
            continue
        if (
            kind == "link"
            or (kind == "dir" and name == module and parts in packages)
            or (kind == "file" and name != module)
        ):
            found.append("/".join(parts))
    return sorted(found)
