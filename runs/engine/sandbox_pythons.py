"""The Python installations a sandbox's read-only runtime holds, and how a sandbox that is given
`site_files` (the Terminal-Bench verifier's guard, runs/engine/verifier_site/) makes every one of
them read those files and never a user site (docs/decisions.md, "rb: every interpreter of the
sandbox guarded, no user site").

Any Python a test script names by its path runs: the virtualenv's (first on `PATH`), the base
interpreter the virtualenv was made from, Debian's `/usr/bin/python3` (also `/bin/python3`
through the merged-usr link), and whatever other installation `/usr` holds (a bundled one under
`/usr/lib`). For each, the sandbox lays over its directories read-only tmpfs copies (a bind of
each real entry plus ours; a new file cannot be mounted inside the read-only runtime itself):

- the `site_files` in each of its site directories (`…/site-packages`, Debian's
  `dist-packages`): its `site` reads a `.pth` there at every start, whatever `PYTHONPATH`,
  `-E` or `-I` say;
- a `pyvenv.cfg` beside its `bin/` (`include-system-site-packages = false`, `home` its own
  directory): `site` then takes the interpreter for a virtualenv of itself, reads its own site
  directories first and sets `ENABLE_USER_SITE` to false before the user site
  (`~/.local/lib/pythonX.Y/site-packages` under HOME, the agent's `/app`) would be read —
  whatever the environment says (PYTHONNOUSERSITE cleared, `-E`, HOME unset, PYTHONUSERBASE).
  `sys.path`, `sys.prefix` and `sys.base_prefix` stay as they were, but for `/bin/python3`,
  whose prefix becomes `/` (its `pyvenv.cfg` is the root's, and its dist-packages is read as
  `/lib/python3/dist-packages`);
- over each real interpreter (the ELF file) a wrapper, the real one hidden beneath the prefix
  (`.srbench-python/`): the kernel runs the wrapper by its `#!` line, which drops a name given
  by `exec -a`, and it starts the real one under the path it was started by — refusing a path,
  or a directory resolved, outside the runtime's read-only places (a virtualenv the test script
  made in `/tmp` or `/app`, a copy in `/app`), where `pyvenv.cfg`, the site directories and even
  the standard library (found by its landmark beside the name) would be the writer's
  (docs/decisions.md, "hv: the verifier's Pythons under -S, in a script's own virtualenv,
  under another name");
- over its standard library's `encodings/__init__.py` the same file with the `.pth` site files'
  `import` lines first (and an empty file over its cached bytecode): every start imports it,
  `-S` too, which reads no `.pth`.

Interpreters are found by name (`python`, `python3`, `python3.12`: an ELF executable or a link to
one) under `/usr`, the base prefix and the top-level directories of the runtime, once per worker
process.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "HIDDEN_DIR",
    "PYTHON_START_REFUSED",
    "PYVENV_CFG",
    "REFUSED_ENV",
    "Installation",
    "StartupRule",
    "interpreter_binds",
    "pyvenv_cfg_file",
    "runtime_installations",
    "site_overlays",
]

PYVENV_CFG = "pyvenv.cfg"
# Beneath an installation's prefix in the verifier's sandbox: its real interpreters, run only by
# their wrappers (an `$ORIGIN/../lib` RUNPATH still finds the prefix's lib/).
HIDDEN_DIR = ".srbench-python"
ENCODINGS_GLOB = "lib/python3*/encodings/__init__.py"
# The file a refused start is noted in, when the sandbox's environment names one (the verifier's),
# and the verifier's reason (and reward source) when one was: not a verdict.
REFUSED_ENV = "SRBENCH_VERIFIER_REFUSED_LOG"
PYTHON_START_REFUSED = "python_start_refused"
PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
# Top-level names bound or linked into the sandbox's runtime (sandbox_command._runtime_args).
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Where an installation keeps its site directories, relative to its prefix (CPython's,
# Debian's, a lib64 platlibdir's).
SITE_GLOBS = (
    "lib/python*/site-packages",
    "lib64/python*/site-packages",
    "lib/python*/dist-packages",
    "local/lib/python*/dist-packages",
)


@dataclass(frozen=True)
class Installation:
    """One Python installation as the sandbox sees it (its paths are the same on the host,
    but for `prefix` "/", the root of the sandbox's own tmpfs)."""

    prefix: str  # the parent of the interpreter's directory: where `pyvenv.cfg` goes
    home: str  # the directory of the real executable (the `home` of its pyvenv.cfg)
    site_dirs: tuple[str, ...]  # its existing site directories
    is_venv: bool  # it has a pyvenv.cfg of its own (left as it is)
    # Its interpreters as regular ELF files (not links) beneath the prefix: each is run through
    # a wrapper in the verifier's sandbox (interpreter_binds).
    executables: tuple[str, ...] = ()
    # Its standard library's `encodings/__init__.py`: every interpreter start imports it.
    encodings: tuple[str, ...] = ()


def _is_python(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def _interpreters(root: Path) -> Iterable[Path]:
    """Executables named like Python beneath `root` (links to them included; no directory
    link followed)."""
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if PYTHON_NAME.fullmatch(name) and os.access(path, os.X_OK) and _is_python(path):
                yield path


def _site_dirs(prefix: Path) -> tuple[str, ...]:
    found = {str(p) for pattern in SITE_GLOBS for p in prefix.glob(pattern) if p.is_dir()}
    return tuple(sorted(found))


@functools.cache
def runtime_installations(base_prefix: str) -> tuple[Installation, ...]:
    """Every installation under `/usr`, the base prefix (when outside `/usr`) and the runtime's
    top-level directories; a top-level link (`/bin` → `usr/bin`) adds its own view (`/bin/
    python3`, whose prefix is `/`)."""
    roots = [Path("/usr")]
    if not Path(base_prefix).is_relative_to("/usr"):
        roots.append(Path(base_prefix))
    roots += [
        Path("/", n) for n in TOP_LEVEL if Path("/", n).is_dir() and not Path("/", n).is_symlink()
    ]
    homes: dict[str, str] = {}
    executables: dict[str, set[str]] = {}
    for root in roots:
        for path in _interpreters(root):
            prefix = str(path.parent.parent)
            homes.setdefault(prefix, str(path.resolve().parent))
            if not path.is_symlink():
                executables.setdefault(prefix, set()).add(str(path))
    for name in TOP_LEVEL:
        top = Path("/", name)
        if top.is_symlink():
            target = str(top.resolve())
            for prefix, home in list(homes.items()):
                # /usr (whose bin/ holds a Python) seen through /bin → usr/bin: prefix "/".
                if str(Path(prefix) / name) == target:
                    homes.setdefault("/", home)
    return tuple(
        Installation(
            prefix=prefix,
            home=home,
            site_dirs=() if prefix == "/" else _site_dirs(Path(prefix)),
            is_venv=(Path(prefix) / PYVENV_CFG).exists() and prefix != "/",
            executables=tuple(sorted(executables.get(prefix, ()))),
            encodings=()
            if prefix == "/"
            else tuple(sorted(str(p) for p in Path(prefix).glob(ENCODINGS_GLOB) if p.is_file())),
        )
        for prefix, home in sorted(homes.items())
    )


@functools.cache
def _cfg_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="srbench-pyvenv-"))


def _slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_")


def _host_file(name: str, text: str, mode: int = 0o644) -> Path:
    """A host file of ours (in a directory made once per process) holding `text`."""
    directory = _cfg_directory()
    directory.mkdir(mode=0o755, exist_ok=True)  # again, should a cleaner have taken it
    directory.chmod(0o755)
    path = directory / name
    if not path.exists() or path.read_text() != text or path.stat().st_mode & 0o777 != mode:
        # A partial file of this writer's own: two sandboxes start at once (the worker runs
        # as many as it has cores), and a shared partial name let one move the other's away
        # between its write and its chmod (FileNotFoundError, a failed cell).
        fd, partial = tempfile.mkstemp(dir=directory, prefix=path.name + ".", suffix=".new")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(partial, mode)
        os.replace(partial, path)
    return path


def pyvenv_cfg_file(home: str) -> Path:
    """A host file with the `pyvenv.cfg` of an installation whose executable lives in `home`:
    a virtualenv of itself without system site-packages, so no user site."""
    return _host_file(
        _slug(home) + ".cfg", f"home = {home}\ninclude-system-site-packages = false\n"
    )


# The wrapper laid over each real interpreter in the verifier's sandbox. The kernel runs it by
# its `#!` line, which drops the name the interpreter was started under (`exec -a NAME`): it
# runs the real one (hidden beneath the prefix) under the path it was started by, the one Python
# derives its prefix, `pyvenv.cfg` and standard library from. Refused (status 126, noted in the
# file REFUSED_ENV names): a path, or its directory resolved, outside the runtime's read-only
# places (a virtualenv the test script made in /tmp or /app, a copy of the interpreter there),
# where its start-up paths would be the writer's; a PYTHONHOME there; a PYTHONPATH entry there
# holding a start-up module (startup_plants' rule, applied at each start: the agent's program
# the script runs may write one after the archive was checked). `bash -p`: no BASH_ENV, no
# functions from the environment.
WRAPPER = """#!/bin/bash -p
# srbench verifier: {real} (runs/engine/sandbox_pythons.py)
shopt -s nullglob
ro() {{ case "$1/" in {allowed}) return 0 ;; esac; return 1; }}
refuse() {{
  echo "srbench verifier: not started: $1" >&2
  [ -n "${{{env}:-}}" ] && echo "$1" >> "${{{env}}}" 2>/dev/null
  exit 126
}}
name=$(/usr/bin/realpath -s -- "$0") && dir=$(/usr/bin/realpath -e -- "${{name%/*}}") || exit 126
ro "${{name%/*}}" && ro "$dir" || refuse "Python as $name (a place the sandbox's code can write)"
each() {{  # each VALUE FUNCTION: FUNCTION on each resolved entry of a colon-separated list
  local rest=$1 entry
  while :; do
    entry=${{rest%%:*}}
    "$2" "$(/usr/bin/realpath -m -- "${{entry:-$PWD}}")"
    [ "$rest" = "$entry" ] && return
    rest=${{rest#*:}}
  done
}}
home() {{ ro "$1" || refuse "Python with PYTHONHOME $1"; }}
path() {{
  ro "$1" && return
  for f in {plants} "$1"/{editable}*; do
    [ -e "$f" ] || [ -L "$f" ] && refuse "Python with a start-up module on its PYTHONPATH: $f"
  done
  for f in {links}; do
    [ -L "$f" ] && refuse "Python with a start-up module's link on its PYTHONPATH: $f"
  done
}}
[ -n "${{PYTHONHOME:-}}" ] && each "$PYTHONHOME" home
[ -n "${{PYTHONPATH:-}}" ] && each "$PYTHONPATH" path
exec -a "$name" {hidden} "$@"
"""


def _plant_words(modules: Iterable[str], suffixes: Iterable[str]) -> str:
    """The bash words (globs) naming, in a PYTHONPATH entry "$1", each start-up module's file
    and a package's `__init__` (as startup_plants counts them; a data directory of such a name
    does not count)."""
    words = []
    for module in sorted(modules):
        words.append(f'"$1"/{module}/__init__.*')
        for suffix in suffixes:
            words += [f'"$1"/{module}{suffix}', f'"$1"/{module}.*{suffix}']
    return " ".join(words)


# Laid before the standard library's `encodings/__init__.py` in the verifier's sandbox: every
# interpreter start imports it (even under -S, which reads no `.pth`), before any code of the
# command line. It runs the `import` lines of the sandbox's `.pth` site files (the guard's
# loader) as `site` would, each in a namespace of its own.
ENCODINGS_PRELUDE = "exec({line!r}, {{}})\n"


@dataclass(frozen=True)
class StartupRule:
    """startup_plants' rule, as the wrapper applies it to a PYTHONPATH entry at each start."""

    modules: frozenset[str]
    suffixes: tuple[str, ...]
    editable_prefix: str


def interpreter_binds(
    installations: Iterable[Installation],
    read_only: Iterable[str],
    pth_lines: Iterable[str],
    startup: StartupRule,
) -> tuple[dict[str, dict[str, Path]], list[tuple[str, Path]]]:
    """What the verifier's sandbox lays over each base installation: (prefix -> {relative
    name: host file}, its real interpreters hidden beneath it; [(sandbox file, host file)],
    files bound over existing ones: each interpreter's wrapper, its `encodings/__init__.py`
    with the guard's loader first, and an empty file over that module's cached bytecode, so
    that the source is what runs). `read_only`: the places a start may be named from;
    `pth_lines`: the `import` lines of the site files, run first in `encodings`; `startup`: the
    start-up modules a writable PYTHONPATH entry may not hold."""
    allowed = "|".join(f"{shlex.quote(root.rstrip('/'))}/*" for root in sorted(set(read_only)))
    hidden: dict[str, dict[str, Path]] = {}
    binds: list[tuple[str, Path]] = []
    empty = _host_file("empty", "")
    plants = _plant_words(startup.modules, startup.suffixes)
    for installation in installations:
        if installation.is_venv or installation.prefix == "/":
            continue
        for real in installation.executables:
            relative = str(PurePosixPath(real).relative_to(installation.prefix))
            name = f"{HIDDEN_DIR}/{_slug(relative)}"
            hidden.setdefault(installation.prefix, {})[name] = Path(real)
            text = WRAPPER.format(
                real=real,
                allowed=allowed,
                hidden=shlex.quote(f"{installation.prefix}/{name}"),
                env=REFUSED_ENV,
                plants=plants,
                links=" ".join(f'"$1"/{module}' for module in sorted(startup.modules)),
                editable=startup.editable_prefix,
            )
            binds.append((real, _host_file(_slug(real) + ".sh", text, 0o755)))
        for init in installation.encodings:
            original = Path(init).read_text(encoding="utf-8")
            text = "".join(ENCODINGS_PRELUDE.format(line=line) for line in pth_lines) + original
            binds.append((init, _host_file(_slug(init), text)))
            cache = Path(init).parent / "__pycache__"
            binds += [(str(pyc), empty) for pyc in sorted(cache.glob("__init__.*pyc"))]
    return hidden, binds


def site_overlays(
    installations: Iterable[Installation],
    venv_site_dirs: Mapping[str, Path],
    site_files: Mapping[str, Path],
    extra: Mapping[str, Mapping[str, Path]] | None = None,
) -> dict[str, dict[str, Path]]:
    """Sandbox directory -> {file name: host file} to add to it: `site_files` in every site
    directory (`venv_site_dirs`: the virtualenv's, sandbox path -> host path, and each
    installation's), a `pyvenv.cfg` beside each installation that is no virtualenv, and
    `extra` (directory -> {relative name: host file}) merged in."""
    overlays: dict[str, dict[str, Path]] = {}
    for inside in venv_site_dirs:
        overlays.setdefault(inside, {}).update(site_files)
    for installation in installations:
        for site_dir in installation.site_dirs:
            overlays.setdefault(site_dir, {}).update(site_files)
        if not installation.is_venv:
            cfg = pyvenv_cfg_file(installation.home)
            overlays.setdefault(installation.prefix, {})[PYVENV_CFG] = cfg
    for inside, added in (extra or {}).items():  # e.g. interpreter_binds' hidden interpreters
        overlays.setdefault(inside, {}).update(added)
    # Parents first: a site directory's tmpfs lands on its prefix's copy, not beneath it.
    return dict(sorted(overlays.items(), key=lambda item: len(PurePosixPath(item[0]).parts)))
