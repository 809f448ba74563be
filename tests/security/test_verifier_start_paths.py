"""A test script's Python that skips `site`, runs from a virtualenv the script made, or is started
under a name in the agent's directory is still guarded or refused (docs/decisions.md, "hv: the
verifier's Pythons under -S, in a script's own virtualenv, under another name"), in the real
bubblewrap sandbox.

Left open by rb: (a) `python3 -S` imports no `site`, so no `.pth` of ours ran and a `-c` check
from `/app` imported a planted `/app/json.py`; (b) a virtualenv the test script makes has a site
directory of its own without the guard (and one made over a directory the agent left in `/app`
keeps the agent's `.pth`); (c) `exec -a /app/bin/python3 python3` makes the interpreter look for
`pyvenv.cfg` and its standard library beside that name, in the agent's directory. The agent never
does the task; it plants one thing that would end the check's Python with status 0. Every cell
must score 0, and the honest check must still pass with the solution and fail without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.engine.sandbox_pythons import PYTHON_START_REFUSED
from runs.engine.terminal import terminal_session_start
from tests.security.test_verifier_interpreters import (
    CHECK,
    FORGE_LINE,
    INTERPRETERS,
    USER_SITE_VERSIONS,
    harbor,
    plant,
)

JSON_CHECK = "-c \"import json, sys; sys.exit(json.loads('[1]') != [2])\""


def _per_version(pattern: str, text: str) -> dict[str, str]:
    return {pattern.format(v=version): text for version in USER_SITE_VERSIONS}


def _exec_a_cfg(python: str) -> str:
    """The `pyvenv.cfg` the agent leaves beside the name the script starts Python under: the
    real interpreter's directory as home, its own `lib/…/site-packages` read."""
    home = str(Path(python).resolve().parent)
    return f"home = {home}\ninclude-system-site-packages = false"


# Written by the agent's program the script runs first (past the archive check of
# startup_plants): a standard library of the agent's beside /app/bin, found by its landmark.
WRITE_STDLIB = (
    "import os, shutil, sys\n"
    f"for v in {USER_SITE_VERSIONS!r}:\n"
    "    d = f'/app/lib/python{v}'\n"
    "    os.makedirs(f'{d}/encodings', exist_ok=True)\n"
    "    open(f'{d}/os.py', 'w').write('')\n"
    "    open(f'{d}/encodings/__init__.py', 'w').write('import os; os._exit(0)')\n"
    "print('wrong')\n"
)

# Written likewise: a start-up module where the script's PYTHONPATH reaches it (jb's item (1):
# startup_plants refuses one left in the archive, not one a program writes during the script).
WRITE_ENCODINGS = (
    "import os\n"
    "os.makedirs('/app/encodings', exist_ok=True)\n"
    "open('/app/encodings/__init__.py', 'w').write('import os; os._exit(0)')\n"
    "print('wrong')\n"
)

# attack -> (files the agent leaves in /app given the interpreter, the script's lines before the
# check, how the check's interpreter is started).
ATTACKS = {
    # (a) no site: sys.path[0] is /app, and no .pth of ours was read.
    "dash-S-json": (lambda py: {"json.py": FORGE_LINE}, "", f"{{python}} -S {JSON_CHECK}"),
    "dash-S-pythonpath-app": (
        lambda py: {"json.py": FORGE_LINE},
        "export PYTHONPATH=/app\n",
        f"{{python}} -S {JSON_CHECK}",
    ),
    # (b) the script's own virtualenv: its site directory holds no guard.
    "own-venv-json": (
        lambda py: {"json.py": FORGE_LINE},
        "{python} -m venv --without-pip /tmp/v\n",
        f"/tmp/v/bin/python {JSON_CHECK}",
    ),
    # (b) made over a directory the agent left: its .pth stays.
    "own-venv-over-agent-dir": (
        lambda py: _per_version(".venv/lib/python{v}/site-packages/zz-forge.pth", FORGE_LINE),
        "{python} -m venv --without-pip .venv\n",
        f".venv/bin/python {CHECK}",
    ),
    # (c) another name: pyvenv.cfg and site-packages beside it, the agent's.
    "exec-a-pyvenv": (
        lambda py: {
            "pyvenv.cfg": _exec_a_cfg(py),
            **_per_version("lib/python{v}/site-packages/zz-forge.pth", FORGE_LINE),
        },
        "",
        f"(exec -a /app/bin/python3 {{python}} {CHECK})",
    ),
    # (c) another name: a standard library the agent's program wrote beside it.
    "exec-a-stdlib-written-by-the-program": (
        lambda py: {"prog.py": WRITE_STDLIB},
        "python3 /app/prog.py > /app/out.txt\n",
        f"(exec -a /app/bin/python3 {{python}} {CHECK})",
    ),
    # A start-up module or a standard library the agent's program wrote, reached through the
    # script's PYTHONPATH or PYTHONHOME.
    "pythonpath-encodings-written-by-the-program": (
        lambda py: {"prog.py": WRITE_ENCODINGS},
        "export PYTHONPATH=/app\npython3 /app/prog.py > /app/out.txt\n",
        f"{{python}} {CHECK}",
    ),
    "pythonhome-stdlib-written-by-the-program": (
        lambda py: {"prog.py": WRITE_STDLIB},
        "python3 /app/prog.py > /app/out.txt\n",
        f"PYTHONHOME=/app {{python}} {CHECK}",
    ),
}
# Refused by the sandbox's wrapper (the session not verified); the others run the check guarded.
REFUSED = {
    "own-venv-json",
    "own-venv-over-agent-dir",
    "pythonpath-encodings-written-by-the-program",
    "pythonhome-stdlib-written-by-the-program",
}


def _run(python: str, files: dict[str, str], before: str, start: str) -> tuple[int, dict]:
    test_sh = (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\nunset PYTHONNOUSERSITE\n"
        f"{before.format(python=python)}if {start.format(python=python)}; then\n"
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    payload, secret = harbor(f"start-path--{python}", test_sh)
    with terminal_session_start(payload, secret) as session:
        if files:
            code, out, err = session.run_command(plant(files))
            assert code == 0, (out, err)
        return session.verify()


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("python", INTERPRETERS)
def test_a_plant_never_forges_a_check_started_without_site_in_a_venv_or_by_another_name(
    python, attack
):
    make_files, before, start = ATTACKS[attack]
    reward, detail = _run(python, make_files(python), before, start)
    assert reward == 0, (detail.get("reward_source"), detail["verifier_output_tail"])
    refused = attack in REFUSED
    expected = PYTHON_START_REFUSED if refused else "reward.txt"
    assert detail["reward_source"] == expected, detail
    if refused:
        assert detail["refused_pythons"], detail


HONEST = {
    "dash-S": f"{{python}} -S {CHECK} && {{python}} -S -c 'import json, sqlite3'",
    "exec-a-runtime-name": f"(exec -a python3 {{python}} {CHECK})",
}


@pytest.mark.parametrize("honest", sorted(HONEST))
@pytest.mark.parametrize("python", INTERPRETERS)
def test_an_honest_check_without_site_or_renamed_passes_with_its_solution_only(python, honest):
    unsolved, _ = _run(python, {}, "", HONEST[honest])
    solved, detail = _run(
        python, {"calc.py": "def add(a, b):\n    return a + b"}, "", HONEST[honest]
    )
    assert (unsolved, solved) == (0, 1), detail["verifier_output_tail"]
