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
  `/lib/python3/dist-packages`).

Interpreters are found by name (`python`, `python3`, `python3.12`: an ELF executable or a link to
one) under `/usr`, the base prefix and the top-level directories of the runtime, once per worker
process.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "PYVENV_CFG",
    "Installation",
    "pyvenv_cfg_file",
    "runtime_installations",
    "site_overlays",
]

PYVENV_CFG = "pyvenv.cfg"
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
    for root in roots:
        for path in _interpreters(root):
            homes.setdefault(str(path.parent.parent), str(path.resolve().parent))
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
        )
        for prefix, home in sorted(homes.items())
    )


@functools.cache
def _cfg_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="srbench-pyvenv-"))


def pyvenv_cfg_file(home: str) -> Path:
    """A host file with the `pyvenv.cfg` of an installation whose executable lives in `home`:
    a virtualenv of itself without system site-packages, so no user site."""
    directory = _cfg_directory()
    directory.mkdir(mode=0o755, exist_ok=True)  # again, should a cleaner have taken it
    directory.chmod(0o755)
    path = directory / (re.sub(r"[^A-Za-z0-9]+", "_", home).strip("_") + ".cfg")
    text = f"home = {home}\ninclude-system-site-packages = false\n"
    if not path.exists() or path.read_text() != text:
        partial = path.with_suffix(".new")
        partial.write_text(text)
        partial.chmod(0o644)
        partial.replace(path)
    return path


def site_overlays(
    installations: Iterable[Installation],
    venv_site_dirs: Mapping[str, Path],
    site_files: Mapping[str, Path],
) -> dict[str, dict[str, Path]]:
    """Sandbox directory -> {file name: host file} to add to it: `site_files` in every site
    directory (`venv_site_dirs`: the virtualenv's, sandbox path -> host path, and each
    installation's), a `pyvenv.cfg` beside each installation that is no virtualenv."""
    overlays: dict[str, dict[str, Path]] = {}
    for inside in venv_site_dirs:
        overlays.setdefault(inside, {}).update(site_files)
    for installation in installations:
        for site_dir in installation.site_dirs:
            overlays.setdefault(site_dir, {}).update(site_files)
        if not installation.is_venv:
            cfg = pyvenv_cfg_file(installation.home)
            overlays.setdefault(installation.prefix, {})[PYVENV_CFG] = cfg
    # Parents first: a site directory's tmpfs lands on its prefix's copy, not beneath it.
    return dict(sorted(overlays.items(), key=lambda item: len(PurePosixPath(item[0]).parts)))
