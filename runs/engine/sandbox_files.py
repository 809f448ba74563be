"""Host-side file handling beneath a directory that sandboxed code can reach (docs/decisions.md,
"Sandbox host paths"; DESIGN §4). Split out of :mod:`runs.engine.sandbox`: the sandbox runs
programs, this module writes and reads host files safely. Since the disk budget (docs/
decisions.md "Sandbox disk budget") no host directory is mounted writable: files reach `/app`
as an archive and leave through `collect`; these helpers remain for the fresh directories that
are mounted read-only (Terminal-Bench's hidden tests) and as a second wall.

Every component is opened relative to its parent's descriptor with O_NOFOLLOW, so a symlink
anywhere on the path (not only the last component) is refused instead of followed, and nothing
can resolve outside the starting directory.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

__all__ = [
    "SandboxPathError",
    "fresh_directory",
    "read_file_beneath",
    "safe_relpath",
    "write_sandbox_files",
]


class SandboxPathError(ValueError):
    """A host-side file operation beneath a sandbox directory met a symlink, a non-directory
    parent, an existing entry or a path that leaves the directory: refused, nothing written."""


def safe_relpath(name: str) -> PurePosixPath:
    """`name` as a relative path that stays inside its directory; SandboxPathError if not."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or "\0" in name:
        raise SandboxPathError(
            f"sandbox file path must be relative and inside the workdir: {name!r}"
        )
    return rel


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_beneath(root_fd: int, parts: Sequence[str], *, create: bool, uid: int | None) -> int:
    """A descriptor of the directory `root/parts…`, created 0755 (owned by `uid`) when `create`
    is set. Raises SandboxPathError on a symlink or non-directory component."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            created = False
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    created = True
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP (a symlink), ENOTDIR, ENOENT
                raise SandboxPathError(f"not a plain directory: {part!r} ({exc.strerror})") from exc
            os.close(fd)
            fd = child
            if created:
                # Whatever the process umask: the sandbox uid must be able to traverse it.
                os.fchmod(fd, 0o755)
                if uid is not None:
                    os.fchown(fd, uid, uid)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_sandbox_files(workdir: Path, files: Mapping[str, bytes], uid: int | None) -> None:
    """Write `files` (relative paths) into `workdir`, owned by the sandbox uid when we are root.
    Scripts starting with `#!` are made executable, as a checkout would have them.

    Only ever called on a fresh directory that no sandboxed code has touched; it still refuses
    (SandboxPathError) to follow a symlink or to replace anything that exists, so a mistake can
    never write through a planted link."""
    if not files:
        return
    root_fd = os.open(workdir, _DIR_FLAGS)
    try:
        for name, data in files.items():
            rel = safe_relpath(name)
            parent = _open_beneath(root_fd, rel.parts[:-1], create=True, uid=uid)
            try:
                mode = 0o755 if data.startswith(b"#!") else 0o644
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    fd = os.open(rel.parts[-1], flags, mode, dir_fd=parent)
                except FileExistsError as exc:
                    raise SandboxPathError(f"{name!r} exists already") from exc
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    os.fchmod(handle.fileno(), mode)
                    if uid is not None:
                        os.fchown(handle.fileno(), uid, uid)
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)


def read_file_beneath(directory: Path, name: str, *, max_bytes: int) -> bytes | None:
    """The first `max_bytes` of the regular file `directory/name`, or None when it is missing,
    a symlink (at any component), a FIFO, a device or a directory. Never blocks on a FIFO."""
    rel = safe_relpath(name)
    root_fd = os.open(directory, _DIR_FLAGS)
    try:
        try:
            parent = _open_beneath(root_fd, rel.parts[:-1], create=False, uid=None)
        except SandboxPathError:
            return None
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(rel.parts[-1], flags, dir_fd=parent)
            except OSError:
                return None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                return os.read(fd, max_bytes)
            finally:
                os.close(fd)
        finally:
            os.close(parent)
    finally:
        os.close(root_fd)


def fresh_directory(prefix: str, *, uid: int | None = None) -> Path:
    """A new host directory (0755) that no sandboxed code has ever seen, owned by `uid` when
    given. Hidden files (tests, verifier logs) are only ever written into these."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if uid is not None:
        os.chown(path, uid, uid)
    return path
