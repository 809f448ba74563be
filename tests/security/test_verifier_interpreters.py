"""Every Python a task's test script can start in the verifier's sandbox reads the guard and
never the agent's user site (docs/decisions.md, "rb: every interpreter of the sandbox guarded,
no user site"), in the real bubblewrap sandbox.

Left open before: the guard `.pth` sat in the site directories of the sandbox's virtualenv and
of Debian's `/usr/bin/python3` only, so a base interpreter named by its path (the one the
virtualenv was made from, another Python under `/usr`) imported a planted `json.py` from `/app`;
and the user site of a Python outside a virtualenv (`~/.local/lib/pythonX.Y/site-packages`, read
before any `.pth` of ours, with HOME the agent's `/app`) was refused only by PYTHONNOUSERSITE,
which a test script may clear (or `-E` ignores). The agent never does the task; it plants one
thing that would end the check's Python with status 0. Every cell must score 0.

The interpreters are found here on the host, independently of the sandbox's own search
(runs/engine/sandbox_pythons.py): every executable named `python…` under `/usr` and the base
prefix, once per directory, plus `/bin/…` where `/bin` is the merged-usr link.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from runs.engine.sandbox_command import sandbox_available
from runs.engine.terminal import terminal_session_start

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

PYTHON_NAME = re.compile(r"python3(\.\d+)?")


def _elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def reachable_interpreters() -> list[str]:
    """One path per directory of each Python executable the sandbox's runtime holds."""
    found: dict[str, str] = {}
    for root in ("/usr", str(Path(sys.base_prefix).resolve())):
        for directory, _dirs, files in os.walk(root):
            for name in sorted(files):
                path = Path(directory) / name
                if PYTHON_NAME.fullmatch(name) and _elf(path.resolve()):
                    found.setdefault(directory, str(path))
    paths = sorted(found.values())
    if Path("/bin").is_symlink() and "/usr/bin" in found:
        paths.append("/bin/" + Path(found["/usr/bin"]).name)
    return paths


INTERPRETERS = reachable_interpreters()
FORGE_LINE = "import os; os._exit(0)"
# The honest check: does the agent's calc.py add? (It never exists here.)
CHECK = '-c "import sys; from calc import add; sys.exit(add(2, 3) != 5)"'
USER_SITE_VERSIONS = [f"3.{minor}" for minor in range(8, 15)]


def user_site_files(home: str, name: str, text: str) -> dict[str, str]:
    return {
        f"{home}/.local/lib/python{version}/site-packages/{name}": text
        for version in USER_SITE_VERSIONS
    }


# Written by the agent's program while the test script runs it (after the start-up check of
# the session's archive, runs/engine/startup_plants.py, which refuses a usercustomize planted
# before): every later Python of the script would import it.
WRITE_USERCUSTOMIZE = (
    "import os\n"
    f"for v in {USER_SITE_VERSIONS!r}:\n"
    "    d = f'/app/.local/lib/python{v}/site-packages'\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    open(f'{d}/usercustomize.py', 'w').write('import os; os._exit(0)')\n"
    "print('wrong')\n"
)
# attack -> (files the agent leaves in /app, the test script's lines before the check, how
# the check's interpreter is started).
ATTACKS: dict[str, tuple[dict[str, str], str, str]] = {
    # (2): the guard's finder is what keeps /app's json.py from the script's own Python.
    "json-module": (
        {"json.py": FORGE_LINE},
        "",
        "{python} -c \"import json, sys; sys.exit(json.loads('[1]') != [2])\"",
    ),
    # (3): the user site, under HOME=/app, once the script clears PYTHONNOUSERSITE.
    "user-site-pth": (user_site_files(".", "zz-forge.pth", FORGE_LINE), "", f"{{python}} {CHECK}"),
    "usercustomize-written-by-the-program": (
        {"prog.py": WRITE_USERCUSTOMIZE},
        "python3 /app/prog.py > /app/out.txt\n",
        f"{{python}} {CHECK}",
    ),
    # No HOME and no passwd entry: `~` stays as it is, relative to the working directory.
    "user-site-pth-home-unset": (
        user_site_files("~", "zz-forge.pth", FORGE_LINE),
        "",
        f"env -u HOME {{python}} {CHECK}",
    ),
    # `-E` ignores PYTHONNOUSERSITE even when the script keeps it.
    "user-site-pth-dash-E": (
        user_site_files(".", "zz-forge.pth", FORGE_LINE),
        "export PYTHONNOUSERSITE=1\n",
        f"{{python}} -E {CHECK}",
    ),
}


def plant(files: dict[str, str]) -> str:
    commands = []
    for name, text in files.items():
        commands.append(f"mkdir -p \"$(dirname '/app/{name}')\"")
        commands.append(f"cat > '/app/{name}' <<'PLANTED'\n{text.rstrip()}\nPLANTED")
    return "\n".join(commands)


def harbor(task_id: str, test_sh: str) -> tuple[dict[str, object], dict[str, object]]:
    payload = {
        "task_id": task_id,
        "format": "harbor",
        "environment": {"local_compatible": True},
        "environment_files": [],
    }
    secret = {
        "tests": [{"path": "tests/test.sh", "content": test_sh}],
        "test_command": "bash /tests/test.sh",
    }
    return payload, secret


def test_the_sandbox_holds_a_base_interpreter_besides_the_virtualenv():
    base = str(Path(sys.base_prefix).resolve() / "bin")
    assert any(path.startswith(base + "/") for path in INTERPRETERS), INTERPRETERS
    assert "/usr/bin/python3" in INTERPRETERS or not Path("/usr/bin/python3").exists()


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("python", INTERPRETERS)
def test_a_plant_never_forges_a_check_by_any_interpreter_of_the_sandbox(python, attack):
    files, before, start = ATTACKS[attack]
    test_sh = (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\nunset PYTHONNOUSERSITE\n"
        f"{before}if {start.format(python=python)}; then\n"
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    payload, secret = harbor(f"{attack}--{python}", test_sh)
    with terminal_session_start(payload, secret) as session:
        code, out, err = session.run_command(plant(files))
        assert code == 0, (out, err)
        reward, detail = session.verify()
    assert detail["reward_source"] == "reward.txt", detail
    assert reward == 0, detail["verifier_output_tail"]


@pytest.mark.parametrize("python", INTERPRETERS)
def test_an_honest_check_by_any_interpreter_passes_with_its_solution_only(python):
    """The script clears PYTHONNOUSERSITE and imports the task's module from /app: the
    interpreter's own site (and the guard) as before, the task's module found."""
    test_sh = (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\nunset PYTHONNOUSERSITE\n"
        f"if {python} {CHECK} && {python} -c 'import json, sqlite3, sysconfig'; then\n"
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    payload, secret = harbor(f"honest--{python}", test_sh)
    with terminal_session_start(payload, secret) as session:
        unsolved, _ = session.verify()
    with terminal_session_start(payload, secret) as session:
        code, out, err = session.run_command(
            "printf 'def add(a, b):\\n    return a + b\\n' > calc.py"
        )
        assert code == 0, (out, err)
        solved, detail = session.verify()
    assert (unsolved, solved) == (0, 1), detail["verifier_output_tail"]
