"""The verifier's pytest and everything it starts, confined (runs/engine/verifier_site): code the
tests run — the agent's program, a daemon it leaves — may not write where the verifier's
reward is written (`/logs`), and may not reach the test script or pytest through ptrace or
`/proc/<pid>/mem`. Loaded by sitecustomize for a pytest process only, never by the project.

Landlock (Linux 5.13+, unprivileged): a ruleset that handles every kind of write and allows
them beneath the sandbox's other writable places only, applied to this process and inherited
by every process it starts. A Landlock domain also refuses ptrace of any process outside it
(the test script). pytest itself, inside the domain with the code it runs, is made
non-dumpable, which refuses ptrace and `/proc/<pid>/mem` to processes of the same user. Where
the kernel has no Landlock, nothing is confined (``confine`` returns None).
"""

from __future__ import annotations

import ctypes
import os

# x86-64 and arm64 share these numbers (the syscalls were added after the tables unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 4, 38
# Where the tests may still write: everything writable in the sandbox but /logs.
WRITABLE = ("/app", "/tmp", "/dev", "/run", "/proc")
# LANDLOCK_ACCESS_FS_WRITE_FILE, REMOVE_DIR … MAKE_SYM; REFER (ABI 2); TRUNCATE (ABI 3).
_WRITES = (1 << 1) | sum(1 << bit for bit in range(4, 13))
_REFER, _TRUNCATE = 1 << 13, 1 << 14


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(result: int, what: str) -> int:
    if result < 0:
        raise OSError(ctypes.get_errno(), f"{what} failed")
    return result


def confine(writable: tuple[str, ...] = WRITABLE) -> int | None:
    """Confine this process and its future children; the Landlock ABI used, or None where the
    kernel has none. Raises OSError when Landlock is there but refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if abi < 1:
        return None
    handled = _WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(handled, 0, 0)
    # The struct grew with the ABI (net rules in 4, scopes in 6): pass the size this one knows.
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _check(
        libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        for path in writable:
            try:
                parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not in this sandbox
            try:
                rule = _PathBeneathAttr(handled, parent)
                _check(
                    libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(parent)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        _check(libc.syscall(_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    _check(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")
    return int(abi)
